"""Model-based memory extraction: the model proposes, ``MemoryRules`` disposes."""

from __future__ import annotations

from datetime import UTC, datetime

from langchain_core.messages import AIMessage

from tests.support.scripted_model import ScriptedChatModel
from threadkeeper.app.memory import ModelExtractor, parse_candidates
from threadkeeper.domain.extraction import RoundText
from threadkeeper.domain.memory import MemoryKind, MemoryRules, Provenance

AT = datetime(2026, 11, 29, tzinfo=UTC)
ROUND = RoundText(
    "t-1", "m-1", "I have two kids; is dental covered? My card is 4111 1111 1111 1111", "Yes.", AT
)


async def test_the_model_proposes_and_the_rules_refuse_personal_data() -> None:
    reply = AIMessage(
        '[{"kind": "profile", "key": "household", "value": "2 children"},'
        ' {"kind": "facts", "key": "product:dental", "value": "dental cover"},'
        ' {"kind": "facts", "key": "card", "value": "4111 1111 1111 1111"},'
        ' {"kind": "profile", "key": "Bad Key", "value": "x"}]'
    )
    model = ScriptedChatModel(script=[reply])
    plan = await ModelExtractor(model).plan(ROUND, [], MemoryRules())
    assert {(i.kind, i.key, i.value) for i in plan.puts} == {
        (MemoryKind.PROFILE, "household", "2 children"),
        (MemoryKind.FACTS, "product:dental", "dental cover"),
    }
    assert plan.refused == {"personal_data:payment_card": 1}
    assert all(i.source == Provenance("t-1", "m-1", AT) for i in plan.puts)
    assert "I have two kids" in model.calls[0][1].content


async def test_an_unusable_answer_remembers_nothing() -> None:
    model = ScriptedChatModel(script=[AIMessage("I cannot do that.")])
    plan = await ModelExtractor(model).plan(ROUND, [], MemoryRules())
    assert plan.puts == ()


async def test_a_failing_model_falls_back_to_the_rules() -> None:
    class Broken(ScriptedChatModel):
        async def _agenerate(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
            raise RuntimeError("provider down")

    plan = await ModelExtractor(Broken()).plan(ROUND, [], MemoryRules())
    assert any(i.key == "product:dental" for i in plan.puts)


def test_parse_skips_malformed_rows() -> None:
    source = Provenance("t", "m", AT)
    text = 'Sure: [{"kind": "facts", "key": "product:life", "value": "life"}, 3, {"kind": "x"}]'
    assert [i.key for i in parse_candidates(text, source)] == ["product:life"]
    assert parse_candidates("[not json", source) == []


def test_parse_reads_from_the_first_bracket_to_the_last() -> None:
    source = Provenance("t", "m", AT)
    row = '{"kind": "facts", "key": "product:life", "value": "life insurance"}'
    assert [i.key for i in parse_candidates(f"[x [ {row} ] y", source)] == []  # not JSON
    assert [i.key for i in parse_candidates(f"Sure:\n[{row}]\nDone.", source)] == ["product:life"]
    assert parse_candidates("] [", source) == []
    assert parse_candidates("[" * 100_000, source) == []
    # deeper than the JSON parser recurses: nothing, rather than an error out of the extractor
    assert parse_candidates("[" * 100_000 + "]" * 100_000, source) == []
