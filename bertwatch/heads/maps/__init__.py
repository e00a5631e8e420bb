"""Statistics of the attention maps themselves (docs/statistics.md's special-token mass, position, spread, segments and
drift): the pure tensor functions (``stats``), the blocked row pass behind them (``row_reductions``) and the labelling
rules on their grids (``patterns``)."""
