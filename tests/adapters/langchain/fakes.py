"""Fake models shared by the LangChain handler tests (LangChain's own fakes, counting real runs)."""

from __future__ import annotations

from typing import Any

from genai_prices import Usage, calc_price
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult

MODEL = "gpt-4o"
USAGE: Any = {"input_tokens": 1000, "output_tokens": 500, "total_tokens": 1500}
PRICE = float(calc_price(Usage(input_tokens=1000, output_tokens=500), model_ref=MODEL).total_price)


def priced_message(text: str = "fine thanks") -> AIMessage:
    return AIMessage(content=text, usage_metadata=USAGE, response_metadata={"model_name": MODEL})


class CountingChatModel(FakeMessagesListChatModel):
    """LangChain's list fake, counting how often the model itself really runs."""

    calls: int = 0
    fail: bool = False

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls += 1
        if self.fail:
            raise ConnectionError("provider down")
        return super()._generate(messages, stop, run_manager, **kwargs)
