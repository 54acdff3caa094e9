"""Run: the executor, a params file -> papermill -> a published, pinned report; what every run's provenance records (it imports no card, index or page code)."""
