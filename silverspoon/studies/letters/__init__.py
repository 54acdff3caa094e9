"""The reference-letters paper's study and its agency classifier."""
