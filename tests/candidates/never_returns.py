"""Adversarial: build() never returns."""


def build():
    while True:
        pass
