"""Every Plotly figure of the app: the only package that imports Plotly.

The builders take plain numpy arrays and numbers (the pages do the data work with :mod:`h2o`) and
return ``go.Figure`` objects meant for ``st.plotly_chart(..., theme="streamlit")``:

* No template, background or text colour is set, so the Streamlit theme (light or dark) applies;
  heatmaps use the theme's sequential colour scale, whose strong end contrasts with the page in
  both themes. The fixed colours are mid-tones that read on either background.
* Arrays go out as numpy (float32 where precision allows): Plotly encodes them as base64 typed
  arrays, several times smaller than JSON lists.
* Every chart has a title, axis titles and a legend entry for each marker, band and line.

One module per concept: ``base`` (colours, line styles, layout, the colour scale), ``heatmaps``
(a replay's scores), ``policies`` (policies compared), ``model`` (the real model's layers),
``lesson`` (the lesson's own figures), ``spike`` (the stale-spike lesson), ``budget`` (Where
should the budget go?), ``needle`` (the needle grid; Evict or compress?). Pages call them as
``figures.name``.
"""

from __future__ import annotations

from .base import (  # noqa: F401
    EXTRA_COLOURS,
    FONT,
    NEUTRAL_LINE,
    ORACLE_COLOUR,
    PLOT_BG,
    POLICY_COLOURS,
    POLICY_STYLES,
    SETTING_COLOUR,
    ColourScale,
    Curve,
    base_layout,
    make_figure,
    policy_colour,
    styled_lines,
)
from .budget import (  # noqa: F401
    GRID_SCALE,
    allocation_grids,
    allocation_perplexity,
    head_shares,
)
from .heatmaps import (  # noqa: F401
    score_heatmap,
)
from .lesson import (  # noqa: F401
    WEIGHTS_COLOUR,
    attention_received,
    decision_bars,
    gib,
    kept_score_lines,
    kv_memory,
)
from .model import (  # noqa: F401
    REGION_COLOURS,
    attention_shares,
    grouped_bars,
    layer_mass,
)
from .needle import (  # noqa: F401
    BITS_COLOURS,
    family_style,
    frontier,
    held_bars,
    needle_heatmaps,
    perplexity_frontier,
)
from .policies import (  # noqa: F401
    budget_curves,
    perplexity_curves,
    policy_bars,
    window_sweep,
)
from .spike import (  # noqa: F401
    LINE_COLOURS,
    received_lines,
)
