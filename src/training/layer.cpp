// placeholder translation unit until the layer has sources
