"""Handlers' labels in English and Turkish (`cronjobs.i18n`) and the escaped
summary table (`cronjobs.summary`)."""

from __future__ import annotations

import re
import threading

from markupsafe import Markup

from conftest import ROOT
from cronjobs import i18n
from cronjobs.i18n import Catalog, gettext, set_locale_selector, use_locale
from cronjobs.summary import summary_table

LABEL = re.compile(r"""\b_\(\s*(["'])(.+?)\1\s*\)""")


def labels_in_handlers() -> set[str]:
    found = set()
    for path in (ROOT / "src" / "handlers").glob("*.py"):
        found |= {m.group(2) for m in LABEL.finditer(path.read_text())}
    return found


def test_every_label_of_the_builtin_handlers_has_a_turkish_translation():
    labels = labels_in_handlers()
    assert {"Days left", "Issuer", "Expected text", "Old backups deleted", "No"} <= labels
    untranslated = sorted(label for label in labels
                          if i18n.LABELS.gettext(label, "tr") == label and label != "URL")
    assert untranslated == []
    assert i18n.LABELS.locales() == ["tr"]


def test_default_is_english_and_a_missing_key_is_the_key():
    assert gettext("Days left") == "Days left"
    with use_locale("tr"):
        assert gettext("Days left") == "Kalan gün"
        assert gettext("no such label") == "no such label"
    assert gettext("Days left") == "Days left"  # restored after the block


def test_region_and_unknown_locales_fall_back():
    for locale, want in (("tr_TR", "Kalan gün"), ("tr-TR", "Kalan gün"), ("de", "Days left"),
                         ("en_GB", "Days left")):
        assert i18n.LABELS.gettext("Days left", locale) == want


def test_a_selector_gives_the_locale_per_request_and_use_locale_wins():
    request_locale = {"value": "tr"}
    set_locale_selector(lambda: request_locale["value"])
    try:
        assert gettext("Issuer") == "Veren"
        request_locale["value"] = None
        assert gettext("Issuer") == "Issuer"
        request_locale["value"] = "tr"
        with use_locale("en"):
            assert gettext("Issuer") == "Issuer"
    finally:
        set_locale_selector(None)
    assert gettext("Issuer") == "Issuer"


def test_the_locale_is_per_thread():
    seen = {}
    with use_locale("tr"):
        thread = threading.Thread(target=lambda: seen.update(other=gettext("Issuer")))
        thread.start()
        thread.join()
        seen["here"] = gettext("Issuer")
    assert seen == {"other": "Issuer", "here": "Veren"}


def test_a_plugin_catalog_of_its_own(tmp_path):
    folder = tmp_path / "tr" / "LC_MESSAGES"
    folder.mkdir(parents=True)
    (folder / "acme.po").write_text('msgid ""\nmsgstr ""\n"Content-Type: text/plain; '
                                    'charset=UTF-8\\n"\n\nmsgid "Folder"\nmsgstr "Klasör"\n',
                                    encoding="utf-8")
    catalog = Catalog(tmp_path, "acme")
    with use_locale("tr"):
        assert catalog.gettext("Folder") == "Klasör"
    assert catalog.gettext("Folder") == "Folder"


def test_summary_table_escapes_skips_none_and_keeps_markup():
    html = summary_table([("<b>label</b>", "<script>x</script>"), ("Skipped", None),
                          ("List", ["a<", "b"]), ("Zero", 0), ("Link", Markup("<a href=x>y</a>"))])
    assert isinstance(html, Markup)
    assert html == Markup('<table class="summary">'
                          "<tr><th>&lt;b&gt;label&lt;/b&gt;</th><td>&lt;script&gt;x&lt;/script&gt;</td></tr>"
                          "<tr><th>List</th><td>a&lt;, b</td></tr>"
                          "<tr><th>Zero</th><td>0</td></tr>"
                          "<tr><th>Link</th><td><a href=x>y</a></td></tr></table>")
