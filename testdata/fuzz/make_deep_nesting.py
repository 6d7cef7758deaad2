#!/usr/bin/env python3
"""Writes the deep-nesting regression inputs of the coco_json and config_loader fuzzers.

Each once killed the process with SIGSEGV (a recursive parser or printer ran out of stack):
  coco_json/regression_deep_segmentation.json  100,000 nested empty lists as a segmentation
      (nlohmann's dump() in the error message's excerpt);
  coco_json/regression_deep_info.json  100,000 nested objects in a root field the reader
      only skips;
  config_loader/regression_deep_any.pbtxt  10,000 Any payloads inside each other (protobuf's
      text-format parser, whose recursion limit does not reach into Any);
  config_loader/regression_deep_struct.pbtxt  10,000 nested google.protobuf.Struct values.
Since core/nesting.h each is an error naming the byte. Deterministic: running it again
writes the same bytes.

  python3 testdata/fuzz/make_deep_nesting.py [--depth_json=100000] [--depth_text=10000]
"""
import argparse
import os

HERE = os.path.dirname(os.path.abspath(__file__))

COCO_HEAD = ('{"images": [{"id": 1, "file_name": "a.png", "width": 4, "height": 4}], '
             '"categories": [{"id": 1, "name": "x"}], "annotations": [{"id": 1, '
             '"image_id": 1, "category_id": 1, "bbox": [0, 0, 2, 2], "segmentation": ')


def write(target, name, text):
    path = os.path.join(HERE, target, name)
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path} ({len(text)} bytes)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth_json", type=int, default=100000)
    parser.add_argument("--depth_text", type=int, default=10000)
    args = parser.parse_args()
    n, m = args.depth_json, args.depth_text
    write("coco_json", "regression_deep_segmentation.json",
          COCO_HEAD + "[" * n + "]" * n + "}]}")
    write("coco_json", "regression_deep_info.json",
          '{"info": ' + "{" * n + "}" * n + ", " + COCO_HEAD[1:] + "[]}]}")
    any_open = "[type.googleapis.com/google.protobuf.Any] { "
    write("config_loader", "regression_deep_any.pbtxt",
          'model { type: "DBNet" options { ' + any_open * m + "}" * m + " } }\n")
    write("config_loader", "regression_deep_struct.pbtxt",
          'model { type: "DBNet" options { [type.googleapis.com/google.protobuf.Struct] { '
          'fields { key: "a" value { ' + "list_value { values { " * m + "} }" * m +
          " } } } } }\n")


if __name__ == "__main__":
    main()
