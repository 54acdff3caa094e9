"""The STOP paper's studies: STOP, its scaled progressions, the downstream tasks, fine-tuning and annotation."""
