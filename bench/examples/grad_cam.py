"""keras.io/examples/vision/grad_cam: the setup cell makes the example's Xception and its
``make_gradcam_heatmap`` (a new ``Model`` from the model's inputs to its last convolution's
output and its predictions, a ``GradientTape`` over one image); the cell re-run is the example's
last, "Let's try another image": the softmax put back on the last layer, ``predict``, and a
heatmap for a chosen class, so every run builds a model on the setup cell's layers. No fit."""

from __future__ import annotations

from . import Example

SETUP = """\
import numpy as np
import tensorflow as tf
import keras

model_builder = keras.applications.xception.Xception
img_size = (299, 299)
preprocess_input = keras.applications.xception.preprocess_input

last_conv_layer_name = "block14_sepconv2_act"


def get_img_array(size):
    # The example loads an image file with keras.utils.load_img; a synthetic one, same shape
    array = np.random.default_rng(0).uniform(0, 255, size + (3,)).astype("float32")
    # We add a dimension to transform our array into a "batch"
    # of size (1, 299, 299, 3)
    array = np.expand_dims(array, axis=0)
    return array


def make_gradcam_heatmap(img_array, model, last_conv_layer_name, pred_index=None):
    # First, we create a model that maps the input image to the activations
    # of the last conv layer as well as the output predictions
    grad_model = keras.models.Model(
        model.inputs, [model.get_layer(last_conv_layer_name).output, model.output]
    )

    # Then, we compute the gradient of the top predicted class for our input image
    # with respect to the activations of the last conv layer
    with tf.GradientTape() as tape:
        last_conv_layer_output, preds = grad_model(img_array)
        if pred_index is None:
            pred_index = tf.argmax(preds[0])
        class_channel = preds[:, pred_index]

    # This is the gradient of the output neuron (top predicted or chosen)
    # with regard to the output feature map of the last conv layer
    grads = tape.gradient(class_channel, last_conv_layer_output)

    # This is a vector where each entry is the mean intensity of the gradient
    # over a specific feature map channel
    pooled_grads = tf.reduce_mean(grads, axis=(0, 1, 2))

    # We multiply each channel in the feature map array
    # by "how important this channel is" with regard to the top predicted class
    # then sum all the channels to obtain the heatmap class activation
    last_conv_layer_output = last_conv_layer_output[0]
    heatmap = last_conv_layer_output @ pooled_grads[..., tf.newaxis]
    heatmap = tf.squeeze(heatmap)

    # For visualization purpose, we will also normalize the heatmap between 0 & 1
    heatmap = tf.maximum(heatmap, 0) / tf.math.reduce_max(heatmap)
    return heatmap.numpy()


# Prepare image
img_array = preprocess_input(get_img_array(size=img_size))

# Make model
model = model_builder(weights=None)  # the example: weights="imagenet" (a download)

# Remove last layer's softmax
model.layers[-1].activation = None

# Print what the top predicted class is
preds = model.predict(img_array)
print("Predicted:", np.argmax(preds[0]))  # the example: decode_predictions(preds, top=1)[0]

# Generate class activation heatmap
heatmap = make_gradcam_heatmap(img_array, model, last_conv_layer_name)
"""

TRAIN = """\
img_array = preprocess_input(get_img_array(size=img_size))

# Print what the two top predicted classes are
preds = model.predict(img_array)
print("Predicted:", np.argsort(preds[0])[-2:])  # the example: decode_predictions(preds, top=2)

heatmap = make_gradcam_heatmap(img_array, model, last_conv_layer_name, pred_index=260)
"""

EXAMPLE = Example(
    name="grad_cam",
    follows="keras.io/examples/vision/grad_cam",
    setup=SETUP,
    train=TRAIN,
    kerases=("keras3", "tf_keras"),
    fits=False,
)
