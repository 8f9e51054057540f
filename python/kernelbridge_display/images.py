"""PIL images saved to a path are also displayed, and shown ones displayed.

Pillow's Image.save(fp) is wrapped, once PIL.Image is imported, so that an
image saved to a file name (a str or an os.PathLike) is then shown with
IPython's display(), which sends its image/png; a save to a file object
(BytesIO, an open file) is not shown, nor one that matplotlib's savefig()
or Pillow itself makes. PIL is never imported for this: an
import hook on sys.meta_path wraps Image.save when the kernel's code first
imports PIL.Image, or at once if it is already imported.

Image.show() is wrapped the same way: in a kernel there is no screen for
Pillow's external viewer, so the image is displayed instead, as a notebook
user means by showing it.
"""

import functools
import importlib.abc
import os
import sys

_MODULE = "PIL.Image"
_MARK = "_kernelbridge_display_wrapped"
# savefig() writes PNG and JPEG through Pillow: the figure is shown already
_NOT_SHOWN = ("matplotlib.", "PIL.")


def _wrap_save(module):
    image = getattr(module, "Image", None)
    save = getattr(image, "save", None)
    if save is None or getattr(save, _MARK, False):
        return

    @functools.wraps(save)
    def save_and_display(self, fp, *args, **kwargs):
        result = save(self, fp, *args, **kwargs)
        caller = sys._getframe(1).f_globals.get("__name__") or ""
        if isinstance(fp, (str, os.PathLike)) and not caller.startswith(_NOT_SHOWN):
            from IPython.display import display

            display(self)
        return result

    setattr(save_and_display, _MARK, True)
    setattr(save_and_display, "__wrapped_save__", save)
    image.save = save_and_display
    _wrap_show(image)


def _wrap_show(image):
    show = getattr(image, "show", None)
    if show is None or getattr(show, _MARK, False):
        return

    @functools.wraps(show)
    def display_instead(self, *args, **kwargs):
        from IPython.display import display

        display(self)

    setattr(display_instead, _MARK, True)
    setattr(display_instead, "__wrapped_save__", show)
    image.show = display_instead


def _unwrap_save(module):
    image = getattr(module, "Image", None)
    for name in ("save", "show"):
        method = getattr(image, name, None)
        if method is not None and getattr(method, _MARK, False):
            setattr(image, name, method.__wrapped_save__)


class _Loader(importlib.abc.Loader):
    """The real loader, then Image.save wrapped."""

    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):  # get_source, get_filename, ... for tracebacks
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        _wrap_save(module)


class ImportHook(importlib.abc.MetaPathFinder):
    """Finds PIL.Image with the other finders and wraps its loader."""

    def find_spec(self, name, path, target=None):
        if name != _MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


_hook = ImportHook()


def install():
    """Displays saved images from now on."""
    if _MODULE in sys.modules:
        _wrap_save(sys.modules[_MODULE])
    elif _hook not in sys.meta_path:
        sys.meta_path.insert(0, _hook)


def uninstall():
    if _hook in sys.meta_path:
        sys.meta_path.remove(_hook)
    if _MODULE in sys.modules:
        _unwrap_save(sys.modules[_MODULE])
