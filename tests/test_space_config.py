"""The two deployment manifests describe the same app: README.md's front matter (Hugging Face Space)
and Spacefile (Deta Space v0), and both agree with requirements.txt and app.py."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from huggingface_hub import SpaceHardware

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def front_matter() -> dict:
    text = (ROOT / "README.md").read_text()
    match = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    assert match, "README.md must start with YAML front matter between --- lines"
    return yaml.safe_load(match.group(1))


@pytest.fixture(scope="module")
def spacefile() -> dict:
    return yaml.safe_load((ROOT / "Spacefile").read_text())


def pinned_gradio() -> str:
    pins = [line.split("==")[1].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()
            if line.startswith("gradio==")]
    assert len(pins) == 1, "requirements.txt pins gradio exactly once"
    return pins[0]


def test_front_matter_is_a_gradio_space_running_app_py(front_matter):
    assert front_matter["sdk"] == "gradio"
    assert str(front_matter["sdk_version"]) == pinned_gradio()
    assert (ROOT / front_matter["app_file"]).is_file() and front_matter["app_file"] == "app.py"
    assert front_matter["title"] and front_matter["emoji"]
    assert len(front_matter["short_description"]) <= 60
    assert front_matter["suggested_hardware"] in {h.value for h in SpaceHardware}


def test_spacefile_is_a_deta_v0_manifest_running_the_same_app(spacefile, front_matter):
    assert spacefile["v"] == 0
    (micro,) = spacefile["micros"]
    assert micro["src"] == "."
    assert micro["engine"] == "python3.9"
    assert shlex.split(micro["run"])[-1] == front_matter["app_file"]
    assert micro["public_routes"] == ["/*"]
    assert all({"name", "description"} <= set(env) for env in micro["presets"]["env"])


def test_app_serves_on_the_port_the_host_gives_and_without_ssr(monkeypatch):
    """`python app.py` launches on $PORT (Deta sets it; gradio itself reads $GRADIO_SERVER_PORT) without SSR
    (embedding with <gradio-app> and iframes wants client-side rendering)."""
    import runpy

    import gradio as gr

    launched = {}
    monkeypatch.setattr(gr.Blocks, "launch", lambda self, **kwargs: launched.update(kwargs))
    monkeypatch.setenv("PORT", "8123")
    runpy.run_path(str(ROOT / "app.py"), run_name="__main__")
    assert launched["server_port"] == 8123 and launched["ssr_mode"] is False


def test_readme_names_the_ci_test_command():
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    readme = (ROOT / "README.md").read_text()
    assert ci in readme
    assert "pip install -r requirements.txt && python app.py" in readme
