"""Localized labels for handlers' Results tabs: gettext catalogs read with Babel.

A handler's `render_summary(result)` gets only the stored result, so it asks this module
for its labels: `from cronjobs.i18n import gettext as _` and `_("Days left")`. The
language is the *current locale*, decided in this order:

1. `use_locale("tr")` (a context manager; per thread and per asyncio task), or
   `set_locale("tr")` for the rest of the current context;
2. the function given to `set_locale_selector(fn)`: the dashboard passes one that
   returns the request's locale (e.g. `flask_babel.get_locale`);
3. `DEFAULT_LOCALE` (English).

Catalogs are `.po` files under `<directory>/<locale>/LC_MESSAGES/<domain>.po`; they are
compiled in memory the first time a locale is used (no build step, no `.mo` files to keep
in step). The built-in handlers use the domain `handlers` in the package's
`translations/` folder (`LABELS`); a plugin makes its own `Catalog(folder, domain)`. A
message with no translation is shown as the message itself (the English label).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from babel.support import NullTranslations

DEFAULT_LOCALE = "en"

_locale: ContextVar[str | None] = ContextVar("cronjobs_locale", default=None)
_selector: Callable[[], object] | None = None


def set_locale_selector(selector: Callable[[], object] | None) -> None:
    """Install `selector()` as the source of the current locale (None removes it).

    Args:
        selector: called with no arguments whenever a label is translated outside
            `use_locale`; returns a locale (`"tr"`, `"tr_TR"`, a `babel.Locale`) or None
            for the default. The dashboard passes its per-request locale getter.
    """
    global _selector
    _selector = selector


def set_locale(locale: str | None) -> None:
    """Set the current locale for the rest of this context (thread or asyncio task)."""
    _locale.set(str(locale) if locale else None)


@contextmanager
def use_locale(locale: str | None) -> Iterator[None]:
    """Translate with `locale` inside the `with` block (then restore the previous one)."""
    token = _locale.set(str(locale) if locale else None)
    try:
        yield
    finally:
        _locale.reset(token)


def get_locale() -> str:
    """The current locale as a string (`"tr"`, `"en"`, ...): see the module docstring."""
    chosen = _locale.get()
    if chosen is None and _selector is not None:
        picked = _selector()
        chosen = str(picked) if picked else None
    return chosen or DEFAULT_LOCALE


class Catalog:
    """The translations of one gettext domain in one folder, per locale, loaded lazily.

    Args:
        directory: folder holding `<locale>/LC_MESSAGES/<domain>.po`.
        domain: the catalog's file name without `.po`.
    """

    def __init__(self, directory: str | Path, domain: str) -> None:
        self.directory = Path(directory)
        self.domain = domain
        self._loaded: dict[str, NullTranslations] = {}
        self._lock = threading.Lock()

    def locales(self) -> list[str]:
        """The locales this catalog has a `.po` file for, sorted."""
        return sorted(p.parent.parent.name for p in
                      self.directory.glob(f"*/LC_MESSAGES/{self.domain}.po"))

    def translations(self, locale: str | None = None) -> NullTranslations:
        """The translations for `locale` (default the current locale). `tr_TR` falls back
        to `tr`; a locale with no catalog gets `NullTranslations` (the messages as they are).
        """
        locale = (locale or get_locale()).replace("-", "_")
        with self._lock:
            if locale not in self._loaded:
                self._loaded[locale] = self._load(locale)
            return self._loaded[locale]

    def _load(self, locale: str) -> NullTranslations:
        # lazy: CLI start-up time (Babel is needed when a label is shown, not when the
        # handler modules that use this catalog are imported by `cronjobs dispatch`)
        from babel.messages.mofile import write_mo
        from babel.messages.pofile import read_po
        from babel.support import NullTranslations, Translations

        for candidate in (locale, locale.split("_")[0]):
            path = self.directory / candidate / "LC_MESSAGES" / f"{self.domain}.po"
            if path.is_file():
                with path.open("rb") as po:
                    catalog = read_po(po, locale=candidate, domain=self.domain)
                buffer = io.BytesIO()
                write_mo(buffer, catalog)
                buffer.seek(0)
                return Translations(buffer, domain=self.domain)
        return NullTranslations()

    def gettext(self, message: str, locale: str | None = None) -> str:
        """`message` translated into `locale` (default the current locale)."""
        return self.translations(locale).gettext(message)


LABELS = Catalog(Path(__file__).parent / "translations", "handlers")


def gettext(message: str) -> str:
    """A label of the built-in handlers in the current locale (English when untranslated)."""
    return LABELS.gettext(message)
