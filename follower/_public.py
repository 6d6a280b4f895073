"""The public face of a package: its re-exported names under its own path."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

if TYPE_CHECKING:
    from collections.abc import Iterable


def name_as_public(module: str, namespace: dict[str, Any], names: Iterable[str]) -> None:
    """Give each of ``names`` defined in a private module of the library ``module``'s path.

    Reprs, tracebacks, pickles and docs then say ``follower.LiveTurns``, not
    ``follower._turns._step.LiveTurns`` (trio does the same for its own names). A
    private module is one with a segment that starts with ``_``
    (``follower._reading._follow``, ``follower.testing._agent``), so a public module
    (``follower.lowlevel``) may re-export names from any private one.
    """
    root = module.partition(".")[0]
    for name in names:
        value = namespace[name]
        home = getattr(value, "__module__", None)
        if not isinstance(home, str) or home.partition(".")[0] != root:
            continue
        if any(part.startswith("_") for part in home.split(".")):
            value.__module__ = module


_T = TypeVar("_T")


class NoPublicConstructor(type):
    """A metaclass for objects only the library makes (trio's ``NoPublicConstructor``).

    Calling the class raises :class:`TypeError`; the library makes one with
    ``Class._create(...)``. The object is still a plain instance: ``isinstance`` and
    type hints work as for any class.
    """

    def __call__(cls, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(f"{cls.__module__}.{cls.__qualname__} has no public constructor")

    def _create(cls: type[_T], *args: object, **kwargs: object) -> _T:
        return super().__call__(*args, **kwargs)  # type: ignore[misc, no-any-return]
