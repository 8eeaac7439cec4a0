"""How the agent knows a client library, and what that allows (``streaming.schema.clients``)."""

from __future__ import annotations

import pytest

from streaming.schema.clients import LIBRARY_EVIDENCE, evidence_of, proven


@pytest.mark.parametrize(
    ("source", "evidence"),
    [
        ("maps", "loaded"),  # a mapped librdkafka or aiokafka extension
        ("fd", "loaded"),  # a kafka-clients jar the JVM holds open
        ("buildinfo", "loaded"),  # a Go module linked into the executable
        ("symbols", "loaded"),
        ("rodata", "loaded"),
        ("jar", "classpath"),
        ("cmdline", "classpath"),
        ("manifest", "declared"),  # the app's package.json names it beside its node_modules
        ("jvm", "runtime"),
        ("package", "installed"),  # a dist-info or node_modules package beside the process
        ("", None),
    ],
)
def test_each_identification_source_has_its_evidence_level(source, evidence) -> None:
    assert evidence_of(source) == evidence


def test_only_an_installed_package_is_no_proof_of_use() -> None:
    assert [e for e in LIBRARY_EVIDENCE if not proven(e)] == ["installed"]
    assert proven(None)  # an agent that does not say: as before
    assert not proven("a-level-a-newer-agent-knows")
