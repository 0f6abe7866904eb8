"""The Session: options, this notebook's runs, its models; it connects the run, the store and the
diagnosis."""
