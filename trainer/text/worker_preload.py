"""Imported once by the forkserver that forks tokenizer workers (see tokens.TokenizerPool).

spaCy's and fastai's imports take seconds; paid here (with the language's
spacy.lang module, preloaded beside this one), every worker forked afterwards
starts in a fraction of a second.
"""

import spacy  # noqa: F401
from fastai.text.core import WordTokenizer  # noqa: F401  (imported for its cost, not its use)

from trainer.text import worker  # noqa: F401
