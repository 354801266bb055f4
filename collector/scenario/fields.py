"""The scenario schema's building blocks: the strict base model and the list checks
every axis of the matrix shares (:mod:`collector.scenario.schema`,
:mod:`collector.scenario.workload`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from collector.scenario.wording import _show


def _unique(what: str = "") -> Callable[[list[Any]], list[Any]]:
    def check(values: list[Any]) -> list[Any]:
        seen: set[Any] = set()
        for value in values:
            if value in seen:
                raise ValueError(f"{_show(value)} listed twice{what}")
            seen.add(value)
        return values

    return check


def _scalar_to_list(value: Any) -> Any:
    """``scale: 20`` means ``scale: [20]`` (an integer only: a string stays an error)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    return value


def _axis(low: int, high: int, *, unique: bool = True) -> Any:
    """A list of integers in [low, high], 1 to 32 of them, a scalar taken as a list of
    one: an axis of the matrix (each value a cell), unique unless said otherwise."""
    checks = [BeforeValidator(_scalar_to_list), Field(min_length=1, max_length=32)]
    checks += [AfterValidator(_unique())] if unique else []
    return Annotated[(list[Annotated[int, Field(ge=low, le=high)]], *checks)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# --- the schema ----------------------------------------------------------------------------
