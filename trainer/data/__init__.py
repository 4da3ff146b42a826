"""Labelled data in: the formats a dataset may come in (tables.py: CSV, JSONL, Parquet), what a run reads
and validates from them (labelled.py: text and label columns, single- or multi-label, the data hash), and
the train / validation / test splits (splits.py); texts without labels, corpus and unlabelled (textfiles.py).
Stdlib and pandas only: trainctl's preflight uses it."""
