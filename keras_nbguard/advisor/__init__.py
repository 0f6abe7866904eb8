"""The largest batch that fits, predicted from probes on a copy of the model."""
