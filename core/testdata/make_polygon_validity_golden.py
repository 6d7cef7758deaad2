"""Writes polygon_validity.txt, shapely's verdict on random small polygons, for polygon_test.

Points lie on a 5 x 5 grid so that crossings, touchings, repeated points and collinear edges
are frequent. One polygon per line: "<valid 0/1> x1 y1 x2 y2 ...", valid meaning
Polygon(points).is_valid and .is_simple, the test of the reference ICDAR evaluators.

  PYTHONPATH=<shapely> python core/testdata/make_polygon_validity_golden.py > core/testdata/polygon_validity.txt
"""
import random

from shapely.geometry import Polygon


def main():
    rng = random.Random(2015)
    for _ in range(2000):
        n = rng.randint(3, 7)
        points = [(rng.randint(0, 4), rng.randint(0, 4)) for _ in range(n)]
        polygon = Polygon(points)
        valid = int(polygon.is_valid and polygon.is_simple)
        print(valid, " ".join(f"{x} {y}" for x, y in points))


if __name__ == "__main__":
    main()
