"""A page read back as a person's browser would: headings, table cells, images; tables balanced."""

from __future__ import annotations

from html.parser import HTMLParser


class Page(HTMLParser):
    """Tags, image sources, headings and table cells of a page; fails on unbalanced tables."""

    def __init__(self):
        super().__init__()
        self.images, self.headings, self.cells, self.open = [], [], [], []
        self._in = None

    def handle_starttag(self, tag, attrs):
        if tag in ("table", "tr", "td", "th", "h2", "figure", "pre"):
            self.open.append(tag)
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        if tag in ("h2", "td", "th"):
            self._in, self._text = tag, ""

    def handle_endtag(self, tag):
        if tag in ("table", "tr", "td", "th", "h2", "figure", "pre"):
            assert self.open and self.open.pop() == tag, f"</{tag}> closes nothing open"
        if tag == self._in:
            (self.headings if tag == "h2" else self.cells).append(self._text.strip())
            self._in = None

    def handle_data(self, data):
        if self._in:
            self._text += data


def parse(raw: bytes) -> Page:
    page = Page()
    page.feed(raw.decode("utf-8"))
    page.close()
    assert not page.open, f"unclosed: {page.open}"
    return page
