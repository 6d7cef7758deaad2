"""cityscapesScripts 2.3.0 scores the result files our evaluator writes as it scores the golden
predictions themselves.

For each golden case (testdata/make_miou_golden.py), write_golden_results writes the case's
predictions through SemanticSegmentationEvaluator::WriteResult; evalPixelLevelSemanticLabeling
then finds them with its own search (getPrediction over <out>/labelIds: exactly one
<city>_<seq>_<frame>*.png per ground truth, or it stops) and its evaluateImgLists must give the
golden per-class IoU, mIoU and category IoU. Predictions of ignored label ids come back as
"unlabeled" (0), which the official evaluation scores the same way, so the numbers are equal.

  semantic_segmentation_results_test.py <write_golden_results> <testdata dir> <tmp dir>
"""
import json
import math
import os
import subprocess
import sys

from cityscapesscripts.evaluation import evalPixelLevelSemanticLabeling as cs_eval

CASES = ("all_classes", "missing_classes", "random")


def same(a, b):
    if b is None:
        return math.isnan(a)
    return abs(a - b) <= 1e-12


def main():
    writer, testdata, tmp = sys.argv[1:4]
    failures = []
    for case in CASES:
        golden_path = os.path.join(testdata, "golden_{}.json".format(case))
        with open(golden_path) as f:
            golden = json.load(f)
        out = os.path.join(tmp, case)
        subprocess.run([writer, golden_path, out], check=True)
        gt_files = [os.path.join(testdata, pair[0]) for pair in golden["pairs"]]

        args = cs_eval.args
        args.predictionPath = os.path.join(out, "labelIds")
        args.predictionWalk = None
        args.evalInstLevelScore = False
        args.evalPixelAccuracy = False
        args.JSONOutput = False
        args.quiet = True
        predictions = [cs_eval.getPrediction(args, gt) for gt in gt_files]
        for gt, prediction in zip(gt_files, predictions):
            city = os.path.basename(os.path.dirname(gt))
            if os.path.dirname(prediction) != os.path.join(out, "labelIds", city):
                failures.append("{}: {} is not under labelIds/{}".format(case, prediction, city))
            colour = os.path.join(out, "color", city, os.path.basename(prediction))
            if not os.path.exists(colour):
                failures.append("{}: no colour drawing {}".format(case, colour))
        result = cs_eval.evaluateImgLists(predictions, gt_files, args)

        checks = [("IoU/" + name, result["classScores"][name], value)
                  for name, value in golden["class_iou"].items()]
        checks += [("category_IoU/" + name, result["categoryScores"][name], value)
                   for name, value in golden["category_iou"].items()]
        checks += [("mIoU", result["averageScoreClasses"], golden["miou"]),
                   ("category_mIoU", result["averageScoreCategories"], golden["category_miou"])]
        for name, ours, expected in checks:
            if not same(ours, expected):
                failures.append("{}: {} of our files is {}, golden {}".format(
                    case, name, ours, expected))
        print("{}: {} result files scored, mIoU {:.6f} (golden {:.6f})".format(
            case, len(predictions), result["averageScoreClasses"], golden["miou"]))
    if failures:
        print("\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
