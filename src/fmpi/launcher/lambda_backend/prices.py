"""The public prices a job's cost is estimated with: a dated table in the package, overridable by a JSON file.

The table holds AWS's list prices (USD, on-demand, without free tier or
volume tiers) in the regions where they are the same; ``AS_OF`` says when
they were taken from AWS's pricing pages. Prices change and regions differ:
``fmpirun --prices FILE.json`` (or ``FMPI_PRICES``) replaces any of them::

    {"as_of": "2026-11-01", "regions": {"eu-central-1": {"lambda_gb_second_x86_64": 0.0000166667}}}

A region missing from the table is priced as us-east-1, and the report says so.
What each price covers is in docs/lambda.md ("What a job cost").
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AS_OF = "2026-11-27"  # checked that day against AWS's pricing pages (the Lambda prices date from 2020-21)
SOURCE = "AWS list prices (aws.amazon.com/lambda/pricing, /s3/pricing, /ec2/pricing/on-demand)"

_US_EAST_1 = {
    "lambda_gb_second_x86_64": 0.0000166667,  # first 6 billion GB-s of the month
    "lambda_gb_second_arm64": 0.0000133334,  # first 7.5 billion GB-s of the month
    "lambda_request": 0.20 / 1_000_000,
    "s3_put_request": 0.005 / 1000,  # PUT, COPY, POST, LIST (S3 Standard)
    "s3_get_request": 0.0004 / 1000,  # GET, SELECT and the others (S3 Standard); DELETE is free
    # The relay on EC2 in the functions' region, reached at its public address: $0.01 per GB each way.
    "relay_transfer_gb": 0.01,
    "redis_request": 0.0,  # a Redis server is billed by the hour, not per request
}
KEYS = tuple(_US_EAST_1)
DEFAULT_REGION = "us-east-1"
# Regions whose Lambda, S3 Standard request and in-region transfer prices equal us-east-1's.
_SAME_AS_US_EAST_1 = ("us-east-1", "us-east-2", "us-west-2", "eu-west-1")


@dataclass(frozen=True)
class Prices:
    region: str  # the region whose prices these are (DEFAULT_REGION when the asked one is missing)
    asked: str  # the region of the job
    as_of: str
    source: str
    per_unit: dict[str, float]

    def describe(self) -> str:
        where = self.region if self.region == self.asked else f"{self.region} (none for {self.asked} in the table)"
        return f"{where} prices of {self.as_of}"


def load(region: str, path: str | None = None) -> Prices:
    """The prices for `region`: the package's table, with `path`'s (a JSON file) over it. ValueError on a bad file."""
    table = {name: dict(_US_EAST_1) for name in _SAME_AS_US_EAST_1}
    as_of, source = AS_OF, SOURCE
    if path:
        override = _read(path)
        as_of = str(override.get("as_of", as_of))
        source = f"{path} over the table of {AS_OF}"
        for name, prices in override["regions"].items():
            table.setdefault(name, dict(_US_EAST_1)).update(prices)
    found = region if region in table else DEFAULT_REGION
    return Prices(found, region, as_of, source, table[found])


def _read(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"cannot read the price file {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"the price file {path} is not JSON: {exc}") from None
    regions = data.get("regions") if isinstance(data, dict) else None
    if not isinstance(regions, dict):
        raise ValueError(f'the price file {path} needs {{"regions": {{"REGION": {{"PRICE": USD, ...}}}}}}')
    for region, prices in regions.items():
        if not isinstance(prices, dict):
            raise ValueError(f"the price file {path}: region {region!r} must map price names to numbers")
        for name, value in prices.items():
            if name not in KEYS:
                raise ValueError(f"the price file {path}: unknown price {name!r} (known: {', '.join(KEYS)})")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"the price file {path}: {region} {name} must be a number of dollars >= 0, not {value!r}")
    return data
