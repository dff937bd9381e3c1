"""The cause model: the timeline as a graph of what each slice waited for (replay.py, order.py), the one
vocabulary of changes (change.py: ``Change``) and the replay with a change against the timeline as measured
(whatif.py). A finding's stake and ``ktrace whatif`` both build a ``Change`` and replay it here."""
