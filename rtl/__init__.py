"""Leaf hardware in Amaranth: the wavelet, route tables, arbitration, the router."""
