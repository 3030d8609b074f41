"""The Real model page's sections, one module each; ``views/real_model.py`` runs them in order.

:mod:`.common` holds what they share (session keys, the page's policy settings, the buttons'
callbacks); :mod:`.shipped` (1, the traces in ``traces/``), :mod:`.story` (2, the layer story),
:mod:`.perplexity` (3) and :mod:`.generation` (4) each draw one section.
"""
