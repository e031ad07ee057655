"""Bound a LangChain chain's spend, offline (fake model): ``python examples/langchain_chain.py``.

Importing ``veronica_mw.adapters.langchain`` is all it takes: every LangChain run inside
``with ExecutionContext(...)`` (or inside a request under the ASGI/WSGI middleware) is contained.
The fake model reports 1,000 input / 500 output tokens of ``gpt-4o`` per call, priced offline.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate

import veronica_mw.adapters.langchain  # noqa: F401  (zero-config: registers the LangChain hook)
from veronica_mw import ExecutionConfig, ExecutionContext, ExecutionHalted

USAGE: Any = {"input_tokens": 1000, "output_tokens": 500, "total_tokens": 1500}
model = FakeMessagesListChatModel(
    responses=[
        AIMessage(content="Try the fjords.", usage_metadata=USAGE, response_metadata={"model_name": "gpt-4o"})
    ]
)
chain = (
    ChatPromptTemplate.from_messages([("human", "Suggest a trip to {country}.")]) | model | StrOutputParser()
)


def main() -> None:
    # Each call costs $0.0075 with gpt-4o prices: the fourth call crosses $0.025 and the fifth is refused.
    ctx = ExecutionContext(ExecutionConfig(max_cost_usd=0.025, max_steps=10, max_retries_total=2))
    answers: list[str] = []
    try:
        with ctx:
            for country in ["Norway", "Chile", "Japan", "Peru", "Kenya", "Iceland"]:
                answers.append(chain.invoke({"country": country}))
    except ExecutionHalted as halt:
        print(f"halted: {halt.reason} ({halt.detail})")
    snap = ctx.get_snapshot()
    print(f"answers: {len(answers)}, steps: {snap.step_count}, cost: ${snap.cost_usd_accumulated:.4f}")


if __name__ == "__main__":
    main()
