"""pytorch/examples ``imagenet/main.py`` on flowpipe: ResNet18 on an ImageFolder, SGD with momentum and weight decay,
StepLR per epoch, top-1/top-5 validation each epoch, the best model kept, exact resume.

``--data DIR`` holds ``train/<class>/<image>`` and ``val/<class>/<image>``, as the original's. Without ImageNet at
hand, ``--make-data DIR`` writes such a tree from the shipped Digits (``--classes``, ``--per-class``) and exits.
``--image-size`` and ``--width`` (the first stage's channels) make small runs. The last line is
``top1=<val top-1> top5=<val top-5> best=<best val top-1> steps=<optimizer steps>``.
"""
import argparse
import math
import os

import torch

from flowpipe import B, V, Checkpoint, ImageFolder, Pipeline, print0
from flowpipe.callbacks import ModelCheckpoint, Validate
from flowpipe.models.torch import ResNet18
from flowpipe.opensets import Digits

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def make_data(root: str, classes: int, per_class: int) -> None:
    """Write Digits, resized to 32x32, as ``root/train/<digit>/<id>.png`` and ``root/val/<digit>/<id>.png``: the
    first ``per_class`` images of each of the first ``classes`` digits, into a new or empty folder."""
    if os.path.isdir(root) and os.listdir(root):
        raise SystemExit(f"Expected a new or empty folder for --make-data. Received: {root!r}, which holds files; "
                         "name a new folder.")
    digits = Digits()
    for part, name in ((digits.train, 'train'), (digits.test, 'val')):
        for label in range(classes):
            items = part.indices[part.labels == label][:per_class]
            folder = os.path.join(root, name, str(label))
            part.create_subset(items).p.resize((32, 32)).dump(folder).next_batch(len(items))


parser = argparse.ArgumentParser(description='flowpipe ImageNet training')
parser.add_argument('--data', default='imagenet', help='the folder of train/ and val/ (default: imagenet)')
parser.add_argument('-j', '--workers', type=int, default=4, help='batches prepared ahead, in threads')
parser.add_argument('--epochs', type=int, default=90)
parser.add_argument('-b', '--batch-size', type=int, default=256)
parser.add_argument('--lr', '--learning-rate', type=float, default=0.1)
parser.add_argument('--momentum', type=float, default=0.9)
parser.add_argument('--wd', '--weight-decay', type=float, default=1e-4, dest='weight_decay')
parser.add_argument('--checkpoints', default='checkpoints', help='the run checkpoints; the best model in best/')
parser.add_argument('--resume', nargs='?', const=True, default=False, metavar='PATH',
                    help='go on from the newest checkpoint of --checkpoints, or from PATH')
parser.add_argument('-e', '--evaluate', metavar='MODEL', help='validate a saved model file and exit')
parser.add_argument('--seed', type=int, default=None)
parser.add_argument('--device', default='cpu')
parser.add_argument('--image-size', type=int, default=224, help='the crop size (the validation resize: 8/7 of it)')
parser.add_argument('--width', type=int, default=64, help="the first stage's channels (64 in ResNet18)")
parser.add_argument('--make-data', metavar='DIR', help='write a small ImageFolder tree of Digits to DIR and exit')
parser.add_argument('--classes', type=int, default=10)
parser.add_argument('--per-class', type=int, default=20)
args = parser.parse_args()
if args.make_data:
    make_data(args.make_data, args.classes, args.per_class)
    raise SystemExit(0)
if args.seed is not None:
    torch.manual_seed(args.seed)

train_data = ImageFolder(os.path.join(args.data, 'train'))
val_data = ImageFolder(os.path.join(args.data, 'val'), classes=train_data.classes)
size = args.image_size
config = {'inputs/images/shape': (3, size, size), 'inputs/labels/classes': train_data.num_classes,
          'initial_block/filters': args.width, 'body/filters': [args.width * 2 ** stage for stage in range(4)],
          'optimizer': {'name': 'SGD', 'lr': args.lr, 'momentum': args.momentum, 'weight_decay': args.weight_decay},
          'decay': {'name': 'StepLR', 'step_size': 30, 'gamma': 0.1, 'frequency': 'epoch'}, 'device': args.device}
to_tensor = Pipeline().to_array().multiply(1 / 255).normalize(MEAN, STD)     # ToTensor(), Normalize(...)
augment = Pipeline().load().random_resized_crop(size).flip(p=0.5)             # RandomResizedCrop, RandomHorizontalFlip
train = ((augment + to_tensor).init_model('net', ResNet18, config=config)
         .train_model('net', images=B.images, labels=B.labels)) << train_data
source = ResNet18.from_file(args.evaluate) if args.evaluate else train
crop = Pipeline().load().resize(size * 8 // 7).center_crop(size)              # Resize(256), CenterCrop(224)
val = ((crop + to_tensor).import_model('net', source)
       .predict_model('net', images=B.images, labels=B.labels, fetches=['predictions', 'loss'],
                      save_to=[V('predictions', mode='e'), V('losses', mode='a')])
       .update(V('targets', mode='e'), B.labels)) << val_data
validate = Validate(val, batch_size=args.batch_size, metrics=['accuracy', 'top5', 'loss'], prefetch=args.workers)
if args.evaluate:
    values, steps, best_top1 = validate.validate(), source.iteration, None
else:
    best = ModelCheckpoint(os.path.join(args.checkpoints, 'best'), monitor='val/accuracy', mode='max')
    checkpoint = Checkpoint(args.checkpoints, every=math.ceil(len(train_data) / args.batch_size))
    train.run(args.batch_size, shuffle=True, n_epochs=args.epochs, whole_epochs=True, seed=args.seed,
              prefetch=args.workers, checkpoint=checkpoint, resume=args.resume, callbacks=[validate, best])
    values, steps, best_top1 = validate.values, train.m('net').iteration, best.best_score
    print0(f"best model: {best.best_path} (val top-1 {best_top1:.4f})")
best_top1 = values['val/accuracy'] if best_top1 is None else best_top1
print0(f"top1={values['val/accuracy']:.4f} top5={values['val/top5']:.4f} best={best_top1:.4f} steps={steps}")
