"""The public face of a package: its re-exported names under its own path."""

from __future__ import annotations

from typing import Any, NoReturn, TypeVar


def name_as_public(package: str, namespace: dict[str, Any], names: list[str]) -> None:
    """Give each of ``names`` defined in a private module of ``package`` the package's path.

    Reprs, tracebacks, pickles and docs then say ``follower.LiveTurns``, not
    ``follower._step.LiveTurns`` (trio does the same for its own names).
    """
    for name in names:
        value = namespace[name]
        if getattr(value, "__module__", "").startswith(package + "._"):
            value.__module__ = package


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
