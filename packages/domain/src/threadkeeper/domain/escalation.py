"""Escalation: when a person takes over the conversation, for every chat model.

The rule (:func:`escalation_due`): the newest human message asks for a person
(:func:`asks_for_person`), or the :data:`CLARIFICATIONS_BEFORE_ESCALATION` final replies before
it were all clarifying (:func:`is_clarifying`). The agent applies it to the answer of any
model and the builtin model to itself; an escalated run ends with the hand-off message of the
user's language (:data:`HANDOFF_MESSAGES`, :func:`detect_language`).

The detector tells a request ("talk to a human", «با اپراتور صحبت کنم», «转人工») from a mention
("my insurance agent", "a tour operator", «真人寿险») in English, Persian and Chinese, on the
folded text (:func:`threadkeeper.domain.text.fold`).

A reply's status is stated under :data:`METADATA_KEY`: by the builtin model in
``additional_kwargs``, by the agent (for any model) in ``response_metadata``.

Pure domain code: standard library, ``threadkeeper.domain`` and ``langchain_core.messages``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from threadkeeper.domain.text import fold, script_counts

__all__ = [
    "CLARIFICATIONS_BEFORE_ESCALATION",
    "CLARIFYING_QUESTIONS",
    "HANDOFF_MESSAGES",
    "METADATA_KEY",
    "Language",
    "asks_for_person",
    "detect_language",
    "escalation_due",
    "is_clarifying",
]

Language = Literal["fa", "zh", "en"]
"""The languages threadkeeper answers in."""

METADATA_KEY: Final = "threadkeeper"
"""Key of a reply's ``{"status", ...}``: in ``AIMessage.additional_kwargs`` as the builtin model
states it, in ``AIMessage.response_metadata`` as the agent stamps it on any model's answer."""

CLARIFICATIONS_BEFORE_ESCALATION: Final = 2
"""This many clarifying replies in a row, and the next run escalates (for every model)."""

CLARIFYING_QUESTIONS: Final[Mapping[Language, str]] = {
    "en": "Could you tell me which insurance product or topic your question is about?",
    "fa": "ممکن است بفرمایید سؤال شما درباره کدام محصول یا موضوع بیمه‌ای است؟",
    "zh": "请问您的问题是关于哪一款保险产品或哪个主题的？",
}
"""The clarifying question per language (the builtin model asks it; a reply that is exactly
one of them is clarifying whatever its metadata says)."""

HANDOFF_MESSAGES: Final[Mapping[Language, str]] = {
    "en": (
        "I'm passing this conversation to a member of our support team. "
        "They will see what we discussed, so you won't need to repeat yourself."
    ),
    "fa": (
        "این گفتگو را به یکی از همکاران پشتیبانی منتقل می‌کنم. "
        "ایشان گفتگوی ما را می‌بینند و لازم نیست دوباره توضیح دهید."
    ),
    "zh": "正在为您转接人工客服，客服人员会看到我们的对话内容，您无需重复说明。",
}
"""What an escalated run answers, per language."""


# ---------------------------------------------------------------------------------------------
# Language

_CJK_WEIGHT: Final = 3
"""A CJK character carries about as much as a short word (≈ 3 Latin letters)."""


def detect_language(text: str) -> Language:
    """The reply language for ``text``: the script with the most weight among its letters.

    Persian/Arabic letters count 1, CJK characters (Han and kana) count 3, Latin letters
    count 1 (so do letters of any other script: the fallback reply is English); ties go to the
    non-Latin script; no letters at all → ``"en"``.
    """
    counts = script_counts(text)
    arabic = counts["arabic"]
    cjk = counts["han"] + counts["kana"]
    latin = counts["latin"] + counts["other"]
    weighted = cjk * _CJK_WEIGHT
    if arabic == 0 and cjk == 0:
        return "en"
    if arabic >= weighted:
        return "fa" if arabic >= latin else "en"
    return "zh" if weighted >= latin else "en"


# ---------------------------------------------------------------------------------------------
# Who asks for a person

_PERSON_EN: Final = (
    r"(?:(?:real|live|actual|human)\s+)?"
    r"(?:human(?:\s+being)?|person|people|someone|somebody|agent|representative|rep|operator"
    r"|staff(?:\s+member)?|(?:customer\s+)?(?:service|support)\s+(?:agent|rep|representative|staff)"
    r"|supervisor|manager)s?"
)
"""Who a person-request names (English), after an optional determiner."""
_WANTED_EN: Final = (
    r"(?:(?:real|live|actual)\s+(?:person|human|agent|operator)|human(?:\s+(?:agent|being|operator))?"
    r"|agent|representative|operator|(?:customer\s+)?(?:service|support)\s+(?:agent|rep"
    r"|representative))s?"
)
"""Who an "I want/need …" request names: never a bare "person" or "someone" ("I need someone
to sign", "a policy for a person with diabetes")."""
_DETERMINER_EN: Final = r"(?:(?:a|an|the|some|your|one\s+of\s+your|any)\s+)?"
_ESCALATION_EN: Final = re.compile(
    # talk / speak / chat to a human, an agent, someone, …
    rf"\b(?:talk|speak|chat)\s+(?:directly\s+)?(?:to|with)\s+{_DETERMINER_EN}{_PERSON_EN}\b"
    # connect / transfer / put / get me (through) to a person
    rf"|\b(?:connect|transfer|put|pass|get|switch|forward|redirect|escalate)\s+(?:me|us|this)\s+"
    rf"(?:(?:through|over|on)\s+)?(?:to\s+|with\s+)?{_DETERMINER_EN}{_PERSON_EN}\b"
    # I want / need / would like a human (not in a question such as "do I need an agent …")
    rf"|(?<!\bdo\s)(?<!\bdoes\s)(?<!\bif\s)\b(?:i|we)(?:'d|\s+would)?\s+(?:really\s+)?"
    rf"(?:want|need|like|prefer|demand|request|ask\s+for)\s+{_DETERMINER_EN}{_WANTED_EN}\b"
    # is there a human I can talk to
    rf"|\b(?:is|are)\s+there\s+{_DETERMINER_EN}{_PERSON_EN}\s+(?:i|we)\s+(?:can|could)\s+"
    r"(?:talk|speak|chat)\b"
    # the whole message is the request: "OPERATOR!", "human please", "real person please"
    rf"|^\W*(?:(?:hi|hello|hey|ok|okay|please|pls|plz|just)\W+)*{_DETERMINER_EN}{_WANTED_EN}"
    r"(?:\W+(?:please|pls|plz|now|asap|thanks|thank\s+you))*\W*$"
)
_FA_PERSON: Final = (
    r"(?:(?:یک|یه)\s+)?"
    r"(?:اپراتور|کارشناس|پشتیبان|پشتیبانی|انسان|ادم|شخص|فرد|نفر|همکار|مسیول|مسئول|نماینده|مشاور)"
    r"(?:ها|های|ان|تان|تون|ی)?"
    r"(?:\s+(?:واقعی|انسانی|بیمه|پشتیبانی|فروش|خسارت))?"
)
"""Who a Persian person-request names (normalised: آ → ا)."""
_FA_TALK: Final = (
    r"(?:صحبت|حرف|گفتگو|گفت\s*و\s*گو|چت|تماس)\s*"
    r"(?:کنم|کنیم|بکنم|بکنیم|بزنم|بزنیم|بگیرم|بگیریم|کردن|کنه|بشه|داشته\s+باشم)(?!\w)"
)
_FA_CONNECT: Final = (
    r"(?:وصل|متصل|منتقل|ارجاع|ارتباط)\s*"
    r"(?:کنید|کن|کنین|بدید|بدهید|بدین|شم|بشم|شوم|بشوم|بفرمایید|می\s*کنید|میکنید)(?!\w)"
)
_ESCALATION_FA: Final = re.compile(
    # با (یک) اپراتور/کارشناس/انسان صحبت کنم — up to two words between ("با کارشناس بیمه …")
    rf"(?<!\w)با\s+{_FA_PERSON}(?:\s+\w+){{0,2}}?\s+{_FA_TALK}"
    # وصل کنید به کارشناس / منو به اپراتور وصل کنید
    rf"|(?<!\w){_FA_CONNECT}\s+(?:به|با)\s+{_FA_PERSON}(?!\w)"
    rf"|(?<!\w)(?:به|با)\s+{_FA_PERSON}\s+{_FA_CONNECT}"
    # پشتیبان انسانی می‌خواهم / اپراتور می‌خوام / یک کارشناس لازم دارم
    rf"|(?<!\w){_FA_PERSON}\s+(?:می\s*خواهم|می\s*خوام|میخوام|میخواهم|لازم\s+دارم)(?!\w)"
    # the whole message: «اپراتور!»، «لطفا کارشناس»
    r"|^\W*(?:لطفا\s+)?(?:اپراتور|کارشناس|پشتیبان\s+انسانی|انسان\s+واقعی|ادم\s+واقعی)"
    r"(?:\s+لطفا)?\W*$"
)
_ZH_HUMAN_SERVICE: Final = (
    r"(?:人工(?:客服|服务|服務|坐席|座席|台|(?=$|[^\w]|[吗嗎吧呢啊呀]))"
    r"|真人(?:客服|服务|服務)?(?=$|[^\w]|[吗嗎吧呢啊呀聊说說])|客服(?:人员|人員)|真人客服)"
)
_ESCALATION_ZH: Final = re.compile(
    # unambiguous on their own
    r"[转轉]人工|人工客服|人工服[务務]|人工[坐座]席|真人客服"
    # 找/接/要/叫/换 + 人工 / 真人 / 客服人员 ("需要人工授精", "了解真人寿险" do not count)
    rf"|(?:接|找|要|叫|换|換|请|請)(?:个|個|一个|一個|位|一位)?{_ZH_HUMAN_SERVICE}"
    # 和/跟 (真)人 说话
    r"|(?:和|跟|与|與|同)(?:真人|人工|客服|人|一个人|一個人|真正的人|活人)"
    r"(?:说话|說話|聊|谈|談|沟通|溝通|对话|對話|交流)"
    r"|找(?:个|個)(?:真)?人(?:聊|说话|說話|谈|談|问问|問問)"
    # 我要/请 联系客服
    r"|(?:我要|我想|帮我|幫我|请|請|给我|給我)(?:联系|聯繫|联络|聯絡|接通|转接|轉接)(?:人工)?客服"
)


def asks_for_person(text: str) -> bool:
    """Whether ``text`` asks to be handed to a person, in English, Persian or Chinese.

    Only a request counts ("talk to a human", "connect me to an agent", "human please",
    «با اپراتور صحبت کنم», «转人工», «我要找真人»), not a mention: "my insurance agent",
    "a tour operator", "is a real person allowed…", «کارشناس بازدید می‌کند», «真人寿险».
    """
    norm = fold(text)
    return bool(
        _ESCALATION_EN.search(norm) or _ESCALATION_FA.search(norm) or _ESCALATION_ZH.search(norm)
    )


# ---------------------------------------------------------------------------------------------
# The rule


def _text(message: BaseMessage) -> str:
    return str(message.text)


def is_clarifying(message: AIMessage) -> bool:
    """A clarifying reply: recognised by its text (what a real model would see), by the status
    the builtin model attached to it (``additional_kwargs[METADATA_KEY]``), or by the status the
    agent stamped on it (``response_metadata[METADATA_KEY]``, for any model)."""
    for meta in (
        message.additional_kwargs.get(METADATA_KEY),
        message.response_metadata.get(METADATA_KEY),
    ):
        if isinstance(meta, dict) and meta.get("status") == "clarifying":
            return True
    return _text(message).strip() in CLARIFYING_QUESTIONS.values()


def escalation_due(messages: Sequence[BaseMessage]) -> bool:
    """The escalation rule, for any model: the newest human message asks for a person
    (:func:`asks_for_person`), or the :data:`CLARIFICATIONS_BEFORE_ESCALATION` final replies
    (AI messages with text and no tool calls) before it were all clarifying
    (:func:`is_clarifying`). Messages after the newest human message (tool calls, tool
    results, the answer itself) do not matter."""
    # From the end, and no further back than the rule looks: a turn late in a long thread
    # costs what an early one does (issue 12: this was a pass over the whole history per run).
    human_at = next(
        (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], HumanMessage)), -1
    )
    if human_at >= 0 and asks_for_person(_text(messages[human_at])):
        return True
    recent: list[AIMessage] = []
    for i in range(human_at - 1, -1, -1):
        if len(recent) == CLARIFICATIONS_BEFORE_ESCALATION:
            break
        m = messages[i]
        if isinstance(m, AIMessage) and not m.tool_calls and _text(m).strip():
            recent.append(m)
    return len(recent) == CLARIFICATIONS_BEFORE_ESCALATION and all(is_clarifying(m) for m in recent)
