"""Labels for handlers' Results tabs in the dashboard's language.

`from cronjobs.i18n import gettext as _` and `_("Status")` in `render_summary`. The
language comes from the function given to `set_locale_selector(fn)` (the dashboard
installs one that returns the request's locale); with none, or outside a request, labels
stay English. A label with no translation is shown as it is (the raw key).

(The same public names as the label catalogs of the handlers branch: at merge its module
replaces this one and the dashboard keeps calling `set_locale_selector`.)
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from babel.support import NullTranslations, Translations

DEFAULT_LOCALE = "en"
_CATALOGS = Path(__file__).parent / "web" / "translations"
_selector: Callable[[], object] | None = None
_loaded: dict[str, NullTranslations] = {}
_lock = threading.Lock()


def set_locale_selector(selector: Callable[[], object] | None) -> None:
    """Install `selector()` (returns a locale such as `"tr"`, or None) as the source of the
    current locale; None removes it."""
    global _selector
    _selector = selector


def get_locale() -> str:
    """The current locale (`"en"` when no selector answers)."""
    picked = _selector() if _selector is not None else None
    return str(picked) if picked else DEFAULT_LOCALE


def gettext(message: str) -> str:
    """`message` in the current locale (as it is when there is no translation)."""
    locale = get_locale().split("_")[0]
    with _lock:
        if locale not in _loaded:
            _loaded[locale] = Translations.load(str(_CATALOGS), [locale], "messages")
        translations = _loaded[locale]
    return translations.gettext(message)
