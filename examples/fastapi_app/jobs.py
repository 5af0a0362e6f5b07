"""Job targets of the example."""


def make_thumbnail(image: str, size: int) -> str:
    return f"{image}@{size}px"
