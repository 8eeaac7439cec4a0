"""Write ``docs/events.schema.json`` from ``streaming.schema.events.json_schema()``.

Run ``.venv/bin/python -m streaming.agent.schemadoc`` after changing the schema; a unit test
fails while the committed file is out of date.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from streaming.schema.events import json_schema

PATH = Path(__file__).resolve().parents[2] / "docs" / "events.schema.json"


def render() -> str:
    return json.dumps(json_schema(), indent=2) + "\n"


def main() -> int:
    PATH.write_text(render())
    print(f"wrote {PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
