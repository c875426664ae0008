"""``evtrain compare``: runs' curves of one stat read back, seeds grouped, learning curves and
final-score aggregates (the interquartile mean, with stratified bootstrap intervals as
rliable defines them) printed and plotted.

Reading runs: :mod:`~evtrain.compare.reading`; finding and grouping them:
:mod:`~evtrain.compare.runs`; the statistics: :mod:`~evtrain.compare.statistics`; a group's
results: :mod:`~evtrain.compare.comparison`; the console report:
:mod:`~evtrain.compare.table`; the figure (PNG, SVG or PDF): :mod:`~evtrain.compare.plot`
(matplotlib, optional).
See docs/compare.md.
"""
