"""keras.io/examples/nlp/lstm_seq2seq: character-level sequence to sequence (English to French).
The setup cell vectorizes the sentence pairs, then trains the encoder-decoder LSTM once and saves
it, as the example's training section does; the re-run cell is its inference section: restore
the model, build the sampling models on its inputs and layers (``model.input[0]``,
``model.layers[3]``), and decode sentences one character per ``predict``.

That cell joins the loaded model's own inputs (named ``input_layer``, ``input_layer_1`` when it
was made) to new ``keras.Input``s: under the magic it failed at once ("The name "input_layer_1"
is used 2 times in the model"), since the clear restarted Keras' name counters; it runs bare. As
in text generation, the decoding calls ``predict`` once per character, which the example
``expects`` keras_nbguard to name (``inference_loop``)."""

from __future__ import annotations

from . import Example

SETUP = """\
import os
import tempfile

import numpy as np
import keras

batch_size = 64  # Batch size for training.
epochs = 1  # the example: 100
latent_dim = 64  # the example: 256
num_samples = 1000  # the example: 10000

# the example reads fra.txt (English, French pairs); these pairs have its shape: short
# sentences of ~30 characters, each target wrapped in "\\t" (start) and "\\n" (end)
rng = np.random.default_rng(0)
letters = list("abcdefghijklmnopqrstuvwxyz .!?")
input_texts = ["".join(rng.choice(letters, rng.integers(3, 16))) for _ in range(num_samples)]
target_texts = [
    "\\t" + "".join(rng.choice(letters, rng.integers(3, 20))) + "\\n" for _ in range(num_samples)
]
input_characters = sorted(set("".join(input_texts)))
target_characters = sorted(set("".join(target_texts)))
num_encoder_tokens = len(input_characters)
num_decoder_tokens = len(target_characters)
max_encoder_seq_length = max([len(txt) for txt in input_texts])
max_decoder_seq_length = max([len(txt) for txt in target_texts])

input_token_index = dict([(char, i) for i, char in enumerate(input_characters)])
target_token_index = dict([(char, i) for i, char in enumerate(target_characters)])

encoder_input_data = np.zeros(
    (len(input_texts), max_encoder_seq_length, num_encoder_tokens), dtype="float32"
)
decoder_input_data = np.zeros(
    (len(input_texts), max_decoder_seq_length, num_decoder_tokens), dtype="float32"
)
decoder_target_data = np.zeros(
    (len(input_texts), max_decoder_seq_length, num_decoder_tokens), dtype="float32"
)
for i, (input_text, target_text) in enumerate(zip(input_texts, target_texts)):
    for t, char in enumerate(input_text):
        encoder_input_data[i, t, input_token_index[char]] = 1.0
    encoder_input_data[i, t + 1 :, input_token_index[" "]] = 1.0
    for t, char in enumerate(target_text):
        decoder_input_data[i, t, target_token_index[char]] = 1.0
        if t > 0:
            decoder_target_data[i, t - 1, target_token_index[char]] = 1.0
    decoder_input_data[i, t + 1 :, target_token_index[" "]] = 1.0
    decoder_target_data[i, t:, target_token_index[" "]] = 1.0

# Define an input sequence and process it.
encoder_inputs = keras.Input(shape=(None, num_encoder_tokens))
encoder = keras.layers.LSTM(latent_dim, return_state=True)
encoder_outputs, state_h, state_c = encoder(encoder_inputs)
encoder_states = [state_h, state_c]
decoder_inputs = keras.Input(shape=(None, num_decoder_tokens))
decoder_lstm = keras.layers.LSTM(latent_dim, return_sequences=True, return_state=True)
decoder_outputs, _, _ = decoder_lstm(decoder_inputs, initial_state=encoder_states)
decoder_dense = keras.layers.Dense(num_decoder_tokens, activation="softmax")
decoder_outputs = decoder_dense(decoder_outputs)
model = keras.Model([encoder_inputs, decoder_inputs], decoder_outputs)

model.compile(optimizer="rmsprop", loss="categorical_crossentropy", metrics=["accuracy"])
model.fit(
    [encoder_input_data, decoder_input_data],
    decoder_target_data,
    batch_size=batch_size,
    epochs=epochs,
    validation_split=0.2,
    verbose=0,
)
# Save model
model_path = os.path.join(tempfile.mkdtemp(), "s2s_model.keras")  # the example: "s2s_model.keras"
model.save(model_path)
"""

TRAIN = """\
# Define sampling models
# Restore the model and construct the encoder and decoder.
model = keras.models.load_model(model_path)

encoder_inputs = model.input[0]  # input_1
encoder_outputs, state_h_enc, state_c_enc = model.layers[2].output  # lstm_1
encoder_states = [state_h_enc, state_c_enc]
encoder_model = keras.Model(encoder_inputs, encoder_states)

decoder_inputs = model.input[1]  # input_2
decoder_state_input_h = keras.Input(shape=(latent_dim,))
decoder_state_input_c = keras.Input(shape=(latent_dim,))
decoder_states_inputs = [decoder_state_input_h, decoder_state_input_c]
decoder_lstm = model.layers[3]
decoder_outputs, state_h_dec, state_c_dec = decoder_lstm(
    decoder_inputs, initial_state=decoder_states_inputs
)
decoder_states = [state_h_dec, state_c_dec]
decoder_dense = model.layers[4]
decoder_outputs = decoder_dense(decoder_outputs)
decoder_model = keras.Model(
    [decoder_inputs] + decoder_states_inputs, [decoder_outputs] + decoder_states
)

# Reverse-lookup token index to decode sequences back to
# something readable.
reverse_input_char_index = dict((i, char) for char, i in input_token_index.items())
reverse_target_char_index = dict((i, char) for char, i in target_token_index.items())


def decode_sequence(input_seq):
    # Encode the input as state vectors.
    states_value = encoder_model.predict(input_seq, verbose=0)

    # Generate empty target sequence of length 1.
    target_seq = np.zeros((1, 1, num_decoder_tokens))
    # Populate the first character of target sequence with the start character.
    target_seq[0, 0, target_token_index["\\t"]] = 1.0

    # Sampling loop for a batch of sequences
    # (to simplify, here we assume a batch of size 1).
    stop_condition = False
    decoded_sentence = ""
    while not stop_condition:
        output_tokens, h, c = decoder_model.predict([target_seq] + states_value, verbose=0)

        # Sample a token
        sampled_token_index = np.argmax(output_tokens[0, -1, :])
        sampled_char = reverse_target_char_index[sampled_token_index]
        decoded_sentence += sampled_char

        # Exit condition: either hit max length
        # or find stop character.
        if sampled_char == "\\n" or len(decoded_sentence) > max_decoder_seq_length:
            stop_condition = True

        # Update the target sequence (of length 1).
        target_seq = np.zeros((1, 1, num_decoder_tokens))
        target_seq[0, 0, sampled_token_index] = 1.0

        # Update states
        states_value = [h, c]
    return decoded_sentence


for seq_index in range(3):  # the example: 20
    # Take one sequence (part of the training set)
    # for trying out decoding.
    input_seq = encoder_input_data[seq_index : seq_index + 1]
    decoded_sentence = decode_sequence(input_seq)
"""

EXAMPLE = Example(
    name="lstm_seq2seq",
    follows="https://keras.io/examples/nlp/lstm_seq2seq/",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
    fits=False,
    expects=("inference_loop",),
)
