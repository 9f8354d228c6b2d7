"""Keras' "Text classification from scratch" (keras.io/examples/nlp/text_classification_from_scratch)
through `import lockstep as tf`, under MirroredStrategy: its model as written there (Embedding, Dropout,
two strided Conv1D, GlobalMaxPooling1D, Dense, Dropout and the sigmoid Dense "predictions"; binary
cross-entropy, adam, accuracy), its sizes (20,000 words, 128 dimensions, reviews of 500 words) and its
batch size. Two changes, both to the data:

- The reviews are synthetic, where Keras' example reads IMDB's (a download, and not reachable here): each
  is `sequence_length` word ids of filler words (ids 22 .. max_features - 1) holding 30 sentiment words of
  one kind at random places, positive ones (ids 2 .. 11) for label 1 or negative ones (ids 12 .. 21) for
  label 0. The label is learnable only by finding which kind of words a review holds, wherever they stand:
  what the strided convolutions and the global maximum over the steps do.
- They come as word ids, where Keras' example turns text into ids with TextVectorization; so keras.Input's
  shape is (sequence_length,) where Keras' is (None,) (lockstep's inputs have one length).

    python examples/python/text_classification_from_scratch.py [examples] [epochs]

Prints the test accuracy on its last line ("test accuracy: 0.99...").
"""
import sys

import numpy as np

import lockstep as tf
from lockstep import keras
from lockstep.keras import layers

examples = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 3

# Model constants (Keras' example's).
max_features = 20000
embedding_dim = 128
sequence_length = 500


def reviews(n, seed, sentiment_words=30):
    """n reviews of filler words, each holding a few sentiment words of one kind; label 1 where they are positive."""
    rng = np.random.default_rng(seed)
    x = rng.integers(22, max_features, size=(n, sequence_length))
    y = (rng.random(n) < 0.5).astype(np.int32)
    first = np.where(y == 1, 2, 12)[:, None]  # positive words are ids 2 .. 11, negative ones 12 .. 21
    rows = np.repeat(np.arange(n), sentiment_words)
    x[rows, rng.integers(0, sequence_length, size=rows.size)] = (first + rng.integers(0, 10, size=(n, sentiment_words))).ravel()
    return x, y


x_train, y_train = reviews(examples, seed=0)
x_val, y_val = reviews(examples // 5, seed=1)
x_test, y_test = reviews(examples // 5, seed=2)
print(len(x_train), "Training reviews")

strategy = tf.distribute.MirroredStrategy()
print("Number of devices: {}".format(strategy.num_replicas_in_sync))
with strategy.scope():
    # A integer input for vocab indices.
    inputs = keras.Input(shape=(sequence_length,), dtype="int64")

    # Next, we add a layer to map those vocab indices into a space of dimensionality
    # 'embedding_dim'.
    x = layers.Embedding(max_features, embedding_dim)(inputs)
    x = layers.Dropout(0.5)(x)

    # Conv1D + global max pooling
    x = layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
    x = layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
    x = layers.GlobalMaxPooling1D()(x)

    # We add a vanilla hidden layer:
    x = layers.Dense(128, activation="relu")(x)
    x = layers.Dropout(0.5)(x)

    # We project onto a single unit output layer, and squash it with a sigmoid:
    predictions = layers.Dense(1, activation="sigmoid", name="predictions")(x)

    model = keras.Model(inputs, predictions)

    # Compile the model with binary crossentropy loss and an adam optimizer.
    model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])

# Fit the model using the train and validation data.
model.fit(x_train, y_train, batch_size=32, validation_data=(x_val, y_val), epochs=epochs, verbose=2)

results = model.evaluate(x_test, y_test, batch_size=32, verbose=0, return_dict=True)
print("test accuracy: {:.4f}".format(results["accuracy"]))
