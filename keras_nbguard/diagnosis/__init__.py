"""Causes in words from the records: findings, the trend test, causes within and across runs,
census, compare."""
