"""Reading the drift profiles file (setting ``detector_profiles``); what a profile is and how its
content is checked is ``rag_monitor.detectors.profiles``, which reads no file.

    profiles = load_profiles("rag_monitor/defaults/detectors/profiles.yaml")
"""

from __future__ import annotations

from pathlib import Path

from rag_monitor.detectors.profiles import DriftProfile, profiles_from


def load_profiles(path: str | Path) -> list[DriftProfile]:
    import yaml

    return profiles_from(yaml.safe_load(Path(path).read_text()), str(path))
