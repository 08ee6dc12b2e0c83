"""A character-level tokenizer that is an ordinary transformers object.

Built on `tokenizers` (one token per character, BOS prepended) and wrapped as
`PreTrainedTokenizerFast`, so `save_pretrained` writes a plain `tokenizer.json`
and `AutoTokenizer.from_pretrained(path)` loads it back without
`trust_remote_code`: the toy model goes through the same loading code as a hub model.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
"""Special tokens; they take ids 0..3 in this order, characters follow."""


def build_char_tokenizer(chars: str) -> PreTrainedTokenizerFast:
    r"""A tokenizer with one token per character of `chars` (distinct) plus the special tokens.

    Encoding prepends BOS (as Llama tokenizers do) and never appends EOS; padding
    is on the left, as causal generation needs. Characters outside `chars` map to UNK. With a newline among
    `chars` the split pattern is `[\s\S]`, since `.` skips newlines and a run of them would be one unknown piece;
    without one it stays `.`, so the toy's tokenizer file is what it always was.
    """
    if len(set(chars)) != len(chars):
        raise ValueError(f"characters must be distinct: {chars!r}")
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *chars])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    every_char = Regex(r"[\s\S]" if "\n" in chars else ".")
    backend.pre_tokenizer = pre_tokenizers.Split(every_char, behavior="isolated")  # every character alone
    backend.decoder = decoders.Fuse()  # join tokens without spaces
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK, padding_side="left"
    )
