"""Every lagpilot error subclasses ``LagpilotError``: ``retriable``, ``code`` and ``hint``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from schemas.errors import LagpilotError

PACKAGES = ("pipeline", "actuators", "schemas", "runtime")
GENERATED = ("externalscaler_pb2",)


def _error_classes() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            if any(g in info.name for g in GENERATED) or info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            for _, obj in inspect.getmembers(module, inspect.isclass):
                if obj.__module__ == info.name and issubclass(obj, BaseException):
                    found.append(obj)
    return found


def test_every_error_class_subclasses_the_base() -> None:
    classes = _error_classes()
    assert len(classes) >= 10, classes  # the walk found the errors (not an empty pass)
    strays = [
        f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, LagpilotError)
    ]
    assert strays == []


def test_fields_default_per_class_and_override_per_instance() -> None:
    class Transient(LagpilotError):
        retriable = True
        hint = "wait"

    e = Transient("broker busy")
    assert (e.retriable, e.code, e.hint, str(e)) == (True, None, "wait", "broker busy")
    e = Transient("denied", retriable=False, code="AUTH", hint="grant the ACL")
    assert (e.retriable, e.code, e.hint) == (False, "AUTH", "grant the ACL")
    assert e.as_dict() == {"message": "denied", "code": "AUTH", "retriable": False,
                           "hint": "grant the ACL"}  # fmt: skip
    assert Transient.retriable is True  # the instance's override stays on the instance


def test_the_redpanda_backend_keeps_the_clients_fields() -> None:
    from actuators.backends import RedpandaBackend
    from actuators.errors import ActuatorError
    from actuators.redpanda_admin import RedpandaAdminError

    class Admin:
        def partition(self, topic: str, partition: int) -> dict:
            raise RedpandaAdminError("move in progress", retriable=True, method="GET",
                                     url="http://rp:9644/v1/partitions/kafka/t/0", status=503,
                                     code=503, hint="retry after the move")  # fmt: skip

    with pytest.raises(ActuatorError) as caught:
        RedpandaBackend(Admin(), kafka=None).transfer_leadership("t", 0, 2)  # type: ignore[arg-type]
    e = caught.value
    assert (e.retriable, e.code, e.hint) == (True, 503, "retry after the move")
    assert "GET http://rp:9644/v1/partitions/kafka/t/0" in str(e) and "HTTP 503" in str(e)


def test_other_exceptions_pass_through_the_redpanda_backend() -> None:
    from actuators.backends import RedpandaBackend

    class Admin:
        def partition(self, topic: str, partition: int) -> dict:
            raise KeyError("a bug, not an API error")

    with pytest.raises(KeyError):
        RedpandaBackend(Admin(), kafka=None).transfer_leadership("t", 0, 2)  # type: ignore[arg-type]
