"""The Google Cloud target, all of it in this package: the Target (target.py), its constructs (constructs/), its
commands (commands.py), its catalogue (catalogue.yaml) and the Google API plumbing (docs/design.md, the map)."""
