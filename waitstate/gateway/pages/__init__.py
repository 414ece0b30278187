"""The pages a person opens from a notice's link: an approval request to approve or reject, an
operation's question to answer. Plain HTML built on the server, one stylesheet and a few lines
of script inline (no front-end build step, nothing fetched): `html` holds the layout and how
text from outside is escaped, `approval` and `question` what each page shows, `guard` what a
page's form carries back to prove it came from the page. The routes are in
`waitstate.gateway.routes.pages`.

Templates are Python strings, not package data: the wheel holds every module of the library,
so it holds the pages.
"""
