"""``THREADKEEPER_TOKENIZER``: the counter by name, or a ``tokenizer.json`` file."""

from __future__ import annotations

from pathlib import Path

from threadkeeper.app.config import ConfigError
from threadkeeper.domain.estimate import EstimatingCounter
from threadkeeper.domain.tokens import TiktokenCounter, TokenCounter

NAMED = ("o200k_base", "cl100k_base", "estimate")


class TokenizerJsonCounter(TokenCounter):
    """Exact counts from a Hugging Face ``tokenizer.json`` read from disk (never downloaded)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        from tokenizers import Tokenizer

        self.name = str(path)
        self._tokenizer = Tokenizer.from_file(str(path))

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


def counter_from_name(name: str) -> TokenCounter:
    if name in ("o200k_base", "cl100k_base"):
        return TiktokenCounter(name)
    if name == "estimate":
        return EstimatingCounter()
    path = Path(name)
    if path.suffix == ".json":
        if not path.is_file():
            raise ConfigError(f"THREADKEEPER_TOKENIZER: {path} is not a file")
        return TokenizerJsonCounter(path)
    raise ConfigError(
        f"THREADKEEPER_TOKENIZER must be one of {', '.join(NAMED)} or a tokenizer.json path, "
        f"not {name!r}"
    )
