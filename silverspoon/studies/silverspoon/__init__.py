"""The SilverSpoon paper's studies: normative judgements, professions, narratives."""
