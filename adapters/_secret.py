"""Connection configs whose validation errors never carry a secret.

A private module: :class:`SecretConfig` is the base of the Kafka and Event Hubs connection
configs. Pydantic keeps the input of every failed validation in the error (``errors()``,
``json()``) and prints it in the message: the whole input mapping for a model validator's error
or a missing field, the value for an unknown field. A SASL password or a connection string in
that input would be echoed by any error of the config, a misspelled ``sasl_pasword=`` included.
Here every error of a config, whichever way it is validated (``Config(...)``, ``model_validate``,
``model_validate_json``, as a field of another model), leaves the config with each secret input
replaced by :data:`MASK`: the value of a field typed :class:`~pydantic.SecretStr`, the value of a
field the config does not have (it may be a misspelled secret), and a whole input that is not a
mapping (or a JSON text that does not parse). The other fields' inputs stay, so an error still
says what it got for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from ctistream.engine._model import Model
from pydantic import BaseModel, ConfigDict, SecretBytes, SecretStr, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError, core_schema

__all__ = ["MASK", "SecretConfig"]

#: What an error shows instead of a secret input.
MASK = "**********"

_SECRET_TYPES = (SecretStr, SecretBytes)


class SecretConfig(Model):
    """A frozen config without extra fields whose validation errors hold no secret (driver).

    Subclasses type their secret fields :class:`~pydantic.SecretStr` (which prints masked) and
    raise ``ValueError`` messages that name fields and fixes, never a secret's value; this base
    masks the inputs pydantic keeps in the error (see the module docstring).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        # Around the whole model schema, so that it also covers the model validators of
        # subclasses (they run outside the validators a base class declares).
        def masked(data: Any, validate: Any) -> Any:
            try:
                return validate(data)
            except ValidationError as error:
                masked = _masked(error, cls)
            raise masked  # outside the except: no __context__ holds the unmasked error

        return core_schema.no_info_wrap_validator_function(masked, handler(source))

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **kwargs: Any) -> Any:
        """As pydantic's, and a JSON text that does not parse is not echoed either."""
        try:
            return super().model_validate_json(json_data, **kwargs)
        except ValidationError as error:
            masked = _masked(error, cls)
        raise masked


def _masked(error: ValidationError, cls: type[SecretConfig]) -> ValidationError:
    """``error`` with the secret inputs of ``cls`` replaced by :data:`MASK`."""
    plain = _plain_names(cls)
    details: list[InitErrorDetails] = []
    for e in error.errors():
        loc = e["loc"]
        detail: InitErrorDetails = {
            "type": e["type"],
            "loc": loc,
            "input": _mask_input(e["input"], loc, e["type"], plain),
        }
        if "ctx" in e:
            detail["ctx"] = e["ctx"]
        details.append(detail)
    try:
        return ValidationError.from_exception_data(error.title, details)
    except (KeyError, TypeError, ValueError):  # an error type pydantic cannot make again
        for detail, e in zip(details, error.errors(), strict=True):
            detail["type"] = PydanticCustomError(e["type"], e["msg"].replace("{", "{{"))
            detail.pop("ctx", None)
        return ValidationError.from_exception_data(error.title, details)


def _plain_names(cls: type[BaseModel]) -> set[str]:
    """The names and aliases of the fields of ``cls`` that are not secret."""
    plain: set[str] = set()
    for name, info in cls.model_fields.items():
        types = {info.annotation, *get_args(info.annotation)}
        if not types & set(_SECRET_TYPES):
            plain |= {name} | ({info.alias} if info.alias else set())
    return plain


def _mask_input(value: Any, loc: tuple[Any, ...], kind: str, plain: set[str]) -> Any:
    if kind == "json_invalid":
        return MASK
    if not loc or kind == "missing":  # the whole input: a model validator's error, a missing field
        if isinstance(value, Mapping):
            return {k: v if k in plain else MASK for k, v in value.items()}
        return MASK
    if kind == "extra_forbidden" or loc[0] not in plain:
        return MASK
    return value
