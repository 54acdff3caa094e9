"""Instruments: replies -> scores (parsers, text classifiers, the human audit)."""
