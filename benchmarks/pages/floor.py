"""The first-paint floor: the smallest Streamlit page with one Plotly heatmap.

``benchmarks/first_paint.py`` serves it beside the app: whatever Streamlit and plotly.js cost a
page before its first chart is on screen, this page costs too.
"""

import numpy as np
import plotly.graph_objects as go
import streamlit as st

st.set_page_config(page_title="floor", layout="wide")
st.title("One heatmap")
z = np.random.default_rng(0).random((64, 256))
st.plotly_chart(go.Figure(go.Heatmap(z=z)), width="stretch")
