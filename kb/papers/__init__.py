"""Papers and articles: fetch (or read) HTML or a PDF, extract the article (trafilatura for HTML,
pdfminer.six for PDFs: kb/papers/pdf.py), split it into passages that keep their heading, position
and (PDFs) pages, and store them as citable evidence.

    results = add_papers(db, ["https://arxiv.org/abs/2401.00001", "notes/"], ws.settings.kb)

Each input is all or nothing: a bad input (unreachable, neither HTML nor PDF, too big, undecodable,
a truncated or hostile PDF, no text) raises a one-line UserError and writes nothing. Re-adding a
paper (an address it was met at or names, its DOI, arXiv id or title, or the same extracted text)
changes nothing and says "already in the knowledge base".

Encoding policy: a BOM wins; then the declared charset (HTTP header, then <meta>); a page declared
as something else that is valid UTF-8 with non-ASCII bytes is read as UTF-8 (the usual mislabel),
and bytes invalid in the declared charset are read as UTF-8 if they are valid UTF-8. Both cases are
reported as a note. Text that is valid in neither, or undeclared and not UTF-8, is refused: guessing
would index garbage.

By concern: `fetching` (the bytes and their text), `parsing` (the article and its passages), `pdf`
(a PDF's text in reading order), `links` (a page's scholarly <meta> tags and links), `ingest`
(storing and listing), `follow` (a page and the papers it links to), `discover` (finding papers in
scholarly APIs); the public names of the first ones are re-exported here.
"""

from kb.papers.fetching import HTML_SUFFIXES as HTML_SUFFIXES
from kb.papers.fetching import HTML_TYPES as HTML_TYPES
from kb.papers.fetching import USER_AGENT as USER_AGENT
from kb.papers.fetching import ArxivRef as ArxivRef
from kb.papers.fetching import Fetched as Fetched
from kb.papers.fetching import decode_html as decode_html
from kb.papers.fetching import fetch as fetch
from kb.papers.fetching import is_url as is_url
from kb.papers.fetching import normalise_url as normalise_url
from kb.papers.fetching import parse_arxiv as parse_arxiv
from kb.papers.fetching import read_file as read_file
from kb.papers.ingest import Paper as Paper
from kb.papers.ingest import PaperKeys as PaperKeys
from kb.papers.ingest import PaperResult as PaperResult
from kb.papers.ingest import add_paper as add_paper
from kb.papers.ingest import add_papers as add_papers
from kb.papers.ingest import expand_inputs as expand_inputs
from kb.papers.ingest import known_paper as known_paper
from kb.papers.ingest import list_papers as list_papers
from kb.papers.ingest import title_key as title_key
from kb.papers.parsing import Extracted as Extracted
from kb.papers.parsing import Passage as Passage
from kb.papers.parsing import extract as extract
from kb.papers.parsing import split_passages as split_passages
