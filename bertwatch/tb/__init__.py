"""The bertwatch TensorBoard plugin.

TensorBoard imports :mod:`bertwatch.tb.plugin` at start-up through the ``tensorboard_plugins`` entry point,
so this package imports only tensorboard, werkzeug and numpy: never torch or transformers.
"""
