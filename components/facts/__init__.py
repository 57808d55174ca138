"""The facts everything else is derived from: the hardware targets (hardware.py), every pinned
external artifact (pins.py), the bucket layout (layout.py), what a healthy cluster measures
(expectations.py), node addressing (addressing.py), the models' shapes (models.py), verl at the
pinned ref (verl.py, also shipped into the supervisor's pod) and list prices (prices.py).

Imports nothing of the project; every other room may import it."""
