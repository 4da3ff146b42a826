"""Language models: pretraining a base LM on a corpus (pretrain.py) and the published LMs (store.py,
importer.py: `lm import`), the base LM a run starts from (base.py), fine-tuning it on the task's texts
(finetune.py, domain.py: unlabelled text), the learners (train.py) and the adaptive softmax head (adaptive.py)."""
