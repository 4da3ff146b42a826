"""Text: tokenization into compact token-id tables, their cache in the bucket, fastai DataLoaders over them.

- tokens:  TokenIds (int32 ids + offsets + vocab), parallel `tokenize`, `build_vocab`, `remap`
- cache:   `<lang>/cache/<content-hash>/` per input (labelled texts, each corpus file)
- progress: a tokenization shown as it goes (a log line every few seconds, a bar on a terminal)
- loaders: LM and classifier DataLoaders from cached ids, and the raw-string ones for export
"""
