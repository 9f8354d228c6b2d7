"""Keras' "Text classification with Transformer" (keras.io/examples/nlp/text_classification_with_transformer)
through `import lockstep as tf`, under MirroredStrategy. Its TransformerBlock and TokenAndPositionEmbedding
are Keras' subclasses of keras.layers.Layer, as written there but for two changes: the position embedding
is lockstep's PositionEmbedding (keras_hub's: the rows of positions 0 .. maxlen - 1) where Keras' example
calls pos_emb(ops.arange(maxlen)), and the data are synthetic token sequences, labelled by whether token 1
occurs in them, where Keras' example reads IMDB reviews.

    python examples/python/transformer_text_classification.py [examples] [epochs]

Prints the validation accuracy on its last line ("val accuracy: 0.99...").
"""
import sys

import numpy as np

import lockstep as tf
from lockstep import keras
from lockstep.keras import layers


class TransformerBlock(layers.Layer):
    def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1):
        super().__init__()
        self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
        self.ffn = keras.Sequential([layers.Dense(ff_dim, activation="relu"), layers.Dense(embed_dim)])
        self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
        self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
        self.dropout1 = layers.Dropout(rate)
        self.dropout2 = layers.Dropout(rate)

    def call(self, inputs):
        attn_output = self.att(inputs, inputs)
        attn_output = self.dropout1(attn_output)
        out1 = self.layernorm1(inputs + attn_output)
        ffn_output = self.ffn(out1)
        ffn_output = self.dropout2(ffn_output)
        return self.layernorm2(out1 + ffn_output)


class TokenAndPositionEmbedding(layers.Layer):
    def __init__(self, maxlen, vocab_size, embed_dim):
        super().__init__()
        self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
        self.pos_emb = layers.PositionEmbedding(sequence_length=maxlen)

    def call(self, x):
        x = self.token_emb(x)
        return x + self.pos_emb(x)


examples = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
vocab_size = 2000  # Keras' example: the top 20k words
maxlen = 40  # Keras' example: the first 200 words of each review

# Token sequences (ids 2 .. vocab_size - 1); about half hold token 1 somewhere: their label is 1.
rng = np.random.default_rng(0)
x = rng.integers(2, vocab_size, size=(examples + examples // 4, maxlen))
y = (rng.random(len(x)) < 0.5).astype(np.int32)
x[y == 1, rng.integers(0, maxlen, size=int(y.sum()))] = 1
x_train, y_train, x_val, y_val = x[:examples], y[:examples], x[examples:], y[examples:]
print(len(x_train), "Training sequences")
print(len(x_val), "Validation sequences")

embed_dim = 32  # Embedding size for each token
num_heads = 2  # Number of attention heads
ff_dim = 32  # Hidden layer size in feed forward network inside transformer

strategy = tf.distribute.MirroredStrategy()
print("Number of devices: {}".format(strategy.num_replicas_in_sync))
with strategy.scope():
    inputs = layers.Input(shape=(maxlen,))
    embedding_layer = TokenAndPositionEmbedding(maxlen, vocab_size, embed_dim)
    x = embedding_layer(inputs)
    transformer_block = TransformerBlock(embed_dim, num_heads, ff_dim)
    x = transformer_block(x)
    x = layers.GlobalAveragePooling1D()(x)
    x = layers.Dropout(0.1)(x)
    x = layers.Dense(20, activation="relu")(x)
    x = layers.Dropout(0.1)(x)
    outputs = layers.Dense(2, activation="softmax")(x)

    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])

history = model.fit(x_train, y_train, batch_size=32, epochs=epochs, validation_data=(x_val, y_val), verbose=2)
print("val accuracy: {:.4f}".format(history.history["val_accuracy"][-1]))
