"""A process's start: Python's cyclic garbage collector paused while the start makes what the process keeps for its
life (the imports: spaces', gradio's, torch's; the recording's runs), then all of that frozen out of every later
collection (`gc.freeze`) and the collector resumed where it was on.

Left on, the collector walked those objects over and over while they were made, and each later full collection
walked them all again. Measured on a 2-core CPU: importing torch and gradio 3.8 -> 3.3 s; reading the H200
recording 0.78 -> 0.37 s (the collector ran 216 times during it, twice over the process's 330,000 objects); a full
collection in the server, its ~640,000 start-up objects frozen, 331 -> 12 ms. Reference counting still frees
whatever is dropped; only a cycle alive at the freeze and dropped later is never collected, and the start's own cyclic
garbage is frozen with it (the server's: ~17,000 objects, 2.3 MiB, once).

Used by the server's start (`handlers`, app.py's first import: `pause` at its top, `settle` at its end), the
command line's (`profiling.__main__`) and the recording's loader (`paused`, for any other caller). Also here:
`after_import`, a change to a library made as it is imported: the server's start skips gradio's stub writing
(`skip_type_stubs`); and `app_built_at_launch`, around the page's making: gradio builds its web app once, at launch.
"""
from __future__ import annotations

import gc
import importlib.abc
import importlib.util
import sys
from contextlib import contextmanager
from types import ModuleType
from typing import Callable


def pause() -> bool:
    """Pause the collector; whether it was on (`settle` resumes it only then)."""
    was_on = gc.isenabled()
    gc.disable()
    return was_on


def settle(was_on: bool) -> None:
    """Freeze what is alive now out of later collections, and resume the collector if it was on."""
    gc.freeze()
    if was_on:
        gc.enable()


@contextmanager
def paused():
    """`pause` for the block, `settle` after it (even when it raises)."""
    was_on = pause()
    try:
        yield
    finally:
        settle(was_on)


def after_import(name: str, then: Callable[[ModuleType], None]) -> None:
    """Run `then` on the module `name` as soon as it has been executed, before whatever imports it goes on (at once if
    it is already imported): a one-shot finder ahead of the others, which hands the import back to them."""
    if name in sys.modules:
        then(sys.modules[name])
        return

    class _Then(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != name:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(fullname)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                execute = spec.loader.exec_module

                def exec_module(module: ModuleType) -> None:
                    execute(module)
                    then(module)
                spec.loader.exec_module = exec_module
            return spec
    sys.meta_path.insert(0, _Then())


def skip_type_stubs() -> None:
    """gradio writes its components' type stubs at every import (`create_or_modify_pyi`, 6.31: each component class's
    source file parsed, its .pyi beside gradio's own sources compared and rewritten where it differs): 0.9 s of
    gradio's 2.25 s import on a 2-core CPU, for type checkers, nothing a server uses. Turned off as gradio is
    imported; to call before anything imports it."""
    after_import("gradio.component_meta", _no_stubs)


def _no_stubs(component_meta: ModuleType) -> None:
    component_meta.create_or_modify_pyi = lambda *args, **kwargs: None


@contextmanager
def app_built_at_launch():
    """Inside, a gradio Blocks does not build its web app (`gradio.routes.App.create_app`: FastAPI's analysis of ~80
    routes). gradio 6.31 builds one as a Blocks is made (it queues itself), as its `with` closes and at every `queue()`,
    then builds the one it serves at `launch`: the three before it, 0.25 s of the app's 0.47 s import on a 2-core
    CPU, were thrown away unread. Around the page's making and its queue's setting; the Blocks' `app` is None until
    `launch` (or a later `queue()`) builds it. Leaves gradio as it found it, also when the block raises."""
    try:
        from gradio.routes import App
    except ImportError:  # no gradio here: nothing is built either way
        yield
        return
    build = App.__dict__.get("create_app")
    if build is None:  # a gradio that builds its app elsewhere: left alone
        yield
        return
    App.create_app = staticmethod(lambda *args, **kwargs: None)
    try:
        yield
    finally:
        App.create_app = build
