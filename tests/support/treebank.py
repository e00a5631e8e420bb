"""A hand-made 3-sentence CoNLL-U treebank and a matching tiny fast WordPiece tokenizer, for offline tests."""

from __future__ import annotations

import transformers as T

# Sentence 2 has two multiword tokens ("cat's", "didn't"); sentence 3 an empty node (6.1) and subtyped relations.
CONLLU = """# sent_id = s1
# text = The dogs chased a cat.
1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tdogs\tdog\tNOUN\tNNS\tNumber=Plur\t3\tnsubj\t_\t_
3\tchased\tchase\tVERB\tVBD\t_\t0\troot\t_\t_
4\ta\ta\tDET\tDT\t_\t5\tdet\t_\t_
5\tcat\tcat\tNOUN\tNN\t_\t3\tobj\t_\tSpaceAfter=No
6\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

# sent_id = s2
# text = The cat's dog didn't chase them.
1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2-3\tcat's\t_\t_\t_\t_\t_\t_\t_\t_
2\tcat\tcat\tNOUN\tNN\t_\t4\tnmod:poss\t_\t_
3\t's\t's\tPART\tPOS\t_\t2\tcase\t_\t_
4\tdog\tdog\tNOUN\tNN\t_\t7\tnsubj\t_\t_
5-6\tdidn't\t_\t_\t_\t_\t_\t_\t_\t_
5\tdid\tdo\tAUX\tVBD\t_\t7\taux\t_\t_
6\tn't\tnot\tPART\tRB\tPolarity=Neg\t7\tadvmod\t_\t_
7\tchase\tchase\tVERB\tVB\t_\t0\troot\t_\t_
8\tthem\tthey\tPRON\tPRP\t_\t7\tobj\t_\tSpaceAfter=No
9\t.\t.\tPUNCT\t.\t_\t7\tpunct\t_\t_

# sent_id = s3
# text = A cat was chased by dogs, not a dog.
1\tA\ta\tDET\tDT\t_\t2\tdet\t_\t_
2\tcat\tcat\tNOUN\tNN\t_\t4\tnsubj:pass\t_\t_
3\twas\tbe\tAUX\tVBD\t_\t4\taux:pass\t_\t_
4\tchased\tchase\tVERB\tVBN\t_\t0\troot\t_\t_
5\tby\tby\tADP\tIN\t_\t6\tcase\t_\t_
6\tdogs\tdog\tNOUN\tNNS\t_\t4\tobl:agent\t_\tSpaceAfter=No
6.1\tchased\tchase\tVERB\tVBN\t_\t_\t_\t4:conj\tCopyOf=4
7\t,\t,\tPUNCT\t,\t_\t10\tpunct\t_\t_
8\tnot\tnot\tPART\tRB\tPolarity=Neg\t10\tadvmod\t_\t_
9\ta\ta\tDET\tDT\t_\t10\tdet\t_\t_
10\tdog\tdog\tNOUN\tNN\t_\t6\tconj\t_\tSpaceAfter=No
11\t.\t.\tPUNCT\t.\t_\t4\tpunct\t_\t_

"""

VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "dog",
    "##s",
    "chase",
    "##d",
    "a",
    "cat",
    ".",
    ",",
    "did",
    "n",
    "'",
    "t",
    "s",
    "them",
    "was",
    "by",
    "not",
]


def tiny_tokenizer() -> T.PreTrainedTokenizerBase:
    """A lower-casing fast WordPiece tokenizer over ``VOCAB`` (ids < 120, the tiny test models' vocabulary)."""
    return T.BertTokenizer(vocab={w: i for i, w in enumerate(VOCAB)})
