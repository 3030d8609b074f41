/* Generated from h2o/player/constants.py (python -m h2o.player.constants): edit the
 * values there. The player's Python reads the same names. */
export const SPEEDS = [1, 2, 5, 10, 20, 30, 60];
export const IDLE_REPORT_MS = 700;
export const REQUEST_RETRY_MS = 4000;
export const LOG_DECADES = 4;
export const C = {"evict": "#E8175D", "oracle": "#E15759", "protectFill": "rgba(44,165,141,0.22)", "protectLine": "rgba(44,165,141,0.95)", "sinkFill": "rgba(242,142,43,0.25)", "sinkLine": "rgba(242,142,43,0.95)", "neutral": "rgba(128,128,128,0.9)", "plotBg": "rgba(128,128,128,0.10)", "highlight": ["#E8175D", "#2CA58D", "#B07AA1", "#9C755F"]};
export const SEQ_LIGHT = ["#e4f5ff", "#c7ebff", "#a6dcff", "#83c9ff", "#60b4ff", "#3d9df3", "#1c83e1", "#0068c9", "#0054a3", "#004280"];
