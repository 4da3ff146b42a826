"""Language-model parts the stages and jobs use: the published LMs (store.py; importer.py and
import_checks.py: `lm import`), unlabelled text for fine-tuning (domain.py), the learners (train.py,
parts.py) and the adaptive softmax head (adaptive.py). The stages themselves are in trainer/stages/, the
pretrain job in trainer/jobs/."""
