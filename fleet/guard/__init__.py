"""Where bad input stops, for every HTTP API: one JSON decoder and one walk over the decoded
value (text, depth, size, integer ranges), a DRF parser and paginator built on them, and JSON
error pages for API paths. Nothing is stored or echoed before these checks have passed."""
