/*
 * The runtime every static widget's page runs (meshplan.widgets.runtime.core_js writes it into each widget's
 * HTML; the first copy on a page defines window.__meshplan, later copies of the same version return at once).
 *
 * - read, grade, compare, reveal, sentence, fmtSig, fmtFixed, squash: the transcription of
 *   meshplan/widgets/predict.py (read_prediction, grade, compare, reveal, fmt_sig, fmt_fixed, squash), tested
 *   against it case by case (tests/test_widget_js.py, in Chromium and in Node);
 * - controls(root, data): the controls' state (an index into each control's values), the dependent ranges the
 *   library computed at build time, and key(names), the lookup key of a table over those controls
 *   ("2,0,1": the indices joined by commas);
 * - mount(id): reads the widget's JSON payload and hands it to the renderer of its kind (MP.kinds[kind], which
 *   each widget's own script registers).
 *
 * core_js fills in the placeholders from predict.py: __VERSION__ (runtime.VERSION), __UNITS__ (predict.UNITS:
 * unit -> [quantity, factor to the base unit, the unit as written]), __ZEROS__ (predict.DIGIT_ZEROS: the code
 * point of each digit script's zero) and __MAX__ (predict.MAX_CHARS). Comments before the code (these) are not
 * written into the pages.
 */
/* global __UNITS__:readonly, __ZEROS__:readonly, __MAX__:readonly -- filled in by runtime.core_js */
(function(){
var V="__VERSION__";
if(window.__meshplan&&window.__meshplan.version===V)return;
var MP={version:V,kinds:{}};
var UNITS=__UNITS__,ZEROS=__ZEROS__,MAX_CHARS=__MAX__,MINUS="\u2212",BIG=1e15;
var NUMBER=/^([+\-\u2212]?) ?([0-9]+(?:[ _'.,][0-9]+)*|[.,][0-9]+)(?:[eE]([+\-\u2212]?[0-9]+))? ?(.*)$/;
var HEX=/^[+\-\u2212]?0[xX][0-9a-fA-F]+$/,NOT_FINITE=["inf","infinity","\u221e","nan"];
function unitOf(k){return Object.prototype.hasOwnProperty.call(UNITS,k)?UNITS[k]:null;}
function group(d){var h=d.length%3||3,o=[d.slice(0,h)];for(var i=h;i<d.length;i+=3)o.push(d.slice(i,i+3));return o.join(",");}
function trim(f){f=f.replace(/0+$/,"");return f==="."?"":f;}
function fmtSig(x,sig){if(x===0)return "0";if(!isFinite(x))return String(x);
  var t=Math.abs(x).toExponential(sig-1).split("e"),dg=t[0].replace(".",""),e=+t[1],s;
  if(e>=15||e<-6)s=dg[0]+trim("."+dg.slice(1))+"e"+(e<0?MINUS:"")+Math.abs(e);
  else if(e>=0){var w=dg.slice(0,e+1);while(w.length<e+1)w+="0";s=group(w)+trim("."+dg.slice(e+1));}
  else s="0"+trim("."+"0".repeat(-e-1)+dg);
  return (x<0?MINUS:"")+s;}
function fmtFixed(x,d){if(!(Math.abs(x)<BIG))return fmtSig(x,3);var t=Math.abs(x).toFixed(d).split(".");
  return (x<0&&/[1-9]/.test(t.join(""))?MINUS:"")+group(t[0])+(t.length>1?"."+t[1]:"");}
function squash(t){return String(t==null?"":t).normalize("NFKC").replace(/[ \t\n\r\f\v]+/g," ").replace(/^ +| +$/g,"");}
function clip(t,n){var a=Array.from(t);return a.length<=n?t:a.slice(0,n-1).join("")+"\u2026";}
function asciiDigits(t){var o="";for(var ch of t){var c=ch.codePointAt(0),z=null;
  for(var i=0;i<ZEROS.length;i++)if(ZEROS[i]<=c&&c<=ZEROS[i]+9){z=ZEROS[i];break;}o+=z===null?ch:String(c-z);}return o;}
function refuse(shown,reason){return {value:null,echo:"",note:"",error:"Could not read \u201c"+clip(shown,40)+"\u201d: "+reason+"."};}
function numeral(num){var dots=num.split(".").length-1,commas=num.split(",").length-1,note="",dec,thou;
  if(dots&&commas){dec=num.lastIndexOf(".")>num.lastIndexOf(",")?".":",";if(num.split(dec).length>2)return null;thou=dec==="."?",":".";}
  else if(commas===1&&/^[1-9][0-9]{0,2},[0-9]{3}$/.test(num)){dec="";thou=",";note="the comma read as a thousands separator";}
  else if(commas===1||dots===1){dec=commas?",":".";thou="";}
  else{dec="";thou=commas?",":(dots?".":"");}
  var p=dec?num.split(dec):[num,""],whole=p[0],frac=p[1];
  if(!/^[0-9]*$/.test(frac))return null;
  var g=whole?whole.split(new RegExp("[ _'"+thou+"]")):[""];
  if(g.length>1&&!(/^[1-9][0-9]{0,2}$/.test(g[0])&&g.slice(1).every(function(x){return /^[0-9]{3}$/.test(x);})))return null;
  return [g.join("").replace(/^0+/,"")||"0",frac,note];}
function sameUnit(t,u){t=t.toLowerCase();u=u.toLowerCase();if(t===u)return true;if(unitOf(u))return false;
  return (u.slice(-1)==="s"&&t===u.slice(0,-1))||(u.slice(-2)==="es"&&t===u.slice(0,-2));}
function ok(x,echo,note){return {value:x,echo:echo,note:note,error:null};}
function read(text,unit){unit=unit||"";var shown=squash(text),q=String(text==null?"":text).replace(/[ \t\n\r\f\v]+/g," ").replace(/^ +| +$/g,"");
  if(!shown)return {value:null,echo:"",note:"",error:"Type a prediction first, or press Show me."};
  if(Array.from(shown).length>MAX_CHARS)return refuse(q,"a prediction has at most "+MAX_CHARS+" characters");
  var s=asciiDigits(shown);
  if(HEX.test(s))return refuse(q,"hexadecimal numbers are not read; type the number in decimal");
  if(NOT_FINITE.indexOf(s.replace(/^[+\-\u2212]+/,"").toLowerCase())>=0)return refuse(q,"type a finite number");
  var m=NUMBER.exec(s);if(!m)return refuse(q,"not a number");
  var p=numeral(m[2]);if(!p)return refuse(q,"the digit groups do not read as thousands (groups of three digits)");
  var neg=m[1]==="-"||m[1]===MINUS,exp=(m[3]||"").replace(MINUS,"-"),whole=p[0],frac=p[1],note=p[2];
  var x=Number(whole+"."+(frac||"0")+"e"+(exp||"0")),nonzero=/[1-9]/.test(whole+frac);
  if(neg)x=-x;
  var echo=(neg&&nonzero?MINUS:"")+group(whole)+(frac?"."+frac:"");
  if(exp)echo+="e"+(exp[0]==="-"?MINUS:"")+(exp.replace(/^[+\-]+/,"").replace(/^0+/,"")||"0");
  if(!isFinite(x))return refuse(q,"too large to compare");
  if(nonzero&&x===0)return refuse(q,"too small to compare");
  if(!nonzero)x=0;
  var suffix=unit?" "+unit:"",typed=m[4].replace(/^ +| +$/g,"");
  if(!typed||sameUnit(typed,unit))return ok(x,echo+suffix,note);
  var have=unitOf(typed.toLowerCase()),want=unitOf(unit.toLowerCase());
  if(!have)return refuse(q,"\u201c"+clip(typed,20)+"\u201d after the number is not a unit this page knows");
  if(!want||have[0]!==want[0])return refuse(q,have[2]+" cannot be converted to "+(unit||"a plain number"));
  if(have[1]===want[1])return ok(x,echo+suffix,note);
  var value=x*have[1]/want[1];
  if(!isFinite(value)||(nonzero&&value===0))return refuse(q,value?"too large to compare":"too small to compare");
  return ok(value,echo+" "+have[2]+" = "+fmtSig(value,4)+suffix,note);}
function sentence(r){return "Read as "+r.echo+(r.note?" ("+r.note+")":"")+".";}
function grade(x,v,text,unit,digits,tol){var head="The library says "+text+".";if(!isFinite(v))return head;
  var suffix=unit==="%"?" percentage points":(unit?" "+unit:""),d=x-v,sign=d>=0?"+":MINUS;
  if(v===0){if(d===0)return head+" \u2713 Exact.";return head+" Your prediction is off by "+sign+fmtFixed(Math.abs(d),digits)+suffix+": \u2717 off.";}
  var rel=Math.abs(d)/Math.abs(v),ratio=x/v,detail,verdict;
  if(rel>10)detail="Your prediction is "+(isFinite(ratio)?fmtSig(ratio,2):(ratio>0?"more than 1e308":"less than \u22121e308"))+" \u00d7 the answer";
  else detail="Your prediction is off by "+sign+fmtFixed(Math.abs(d),digits)+suffix+" ("+sign+Math.floor(100*rel+0.5)+" %)";
  if(rel<=tol)verdict="\u2713 within "+Math.floor(100*tol+0.5)+" %";
  else if(rel<=0.25)verdict="\u2248 within 25 %";
  else if(0.1<=ratio&&ratio<=10)verdict="~ right order of magnitude (within a factor of 10)";
  else if(ratio<0)verdict="\u2717 off: the sign is wrong";
  else verdict="\u2717 off by more than a factor of 10";
  return head+" "+detail+": "+verdict+".";}
function compare(pred,r,unit,digits,tol){if(r.error)return "Not a valid combination: "+r.error;
  var typed=squash(pred);if(!typed)return "Type a prediction first, or press Show me.";
  if(typeof r.value==="string"){var same=typed.toLowerCase()===squash(r.value).toLowerCase();
    return "You predicted \u201c"+clip(typed,40)+"\u201d. The library says "+r.text+". "+(same?"\u2713 Your prediction matches.":"\u2717 No match.");}
  if(r.value===null||r.value===undefined)return "The library says "+r.text+".";
  var x=read(pred,unit);if(x.error||x.value===null)return x.error||"";
  return sentence(x)+" "+grade(x.value,r.value,r.text,unit||"",digits,tol);}
function reveal(r){return r.error?"Not a valid combination: "+r.error:"You skipped the prediction. The library says "+r.text+".";}
function controls(root,data){
  var C=data.controls,idx={},els={},fns=[];
  C.forEach(function(c){els[c.name]=root.querySelector('.mp-control[data-name="'+c.name+'"]');});
  function allowed(c){return c.parents.length?(c.allow[c.parents.map(function(p){return idx[p];}).join(",")]||[]):null;}
  function readEl(c){var el=els[c.name],a=allowed(c);
    if(c.input==="slider"){var pos=+el.value;return a?a[pos]:pos;}
    if(c.input==="select")return +el.value;
    var r=el.querySelector("input:checked");return r?+r.value:0;}
  function nearest(a,i){var b=a[0];a.forEach(function(j){if(Math.abs(j-i)<Math.abs(b-i))b=j;});return b;}
  function reason(c){var w=root.querySelector('.mp-why[data-for="'+c.name+'"]'),
      n=root.querySelector('.mp-note[data-for="'+c.name+'"]');
    if(c.why&&w)w.textContent=c.why[c.parents.map(function(p){return idx[p];}).join(",")]||"";
    if(c.note&&n)n.textContent=c.note.texts[c.note.reads.map(function(r){return idx[r];}).join(",")]||"";}
  function show(c){var el=els[c.name],a=allowed(c),i=idx[c.name];reason(c);
    if(c.input==="slider"){var n=a?a.length:c.texts.length;el.max=n-1;el.value=a?a.indexOf(i):i;el.disabled=n<2;
      el.setAttribute("aria-valuetext",c.texts[i]);el.parentNode.querySelector(".mp-value").textContent=c.texts[i];return;}
    var opts=el.querySelectorAll(c.input==="select"?"option":"input");
    for(var k=0;k<opts.length;k++){var o=opts[k],j=+o.value,off=!!a&&a.indexOf(j)<0;o.disabled=off;
      if(c.input==="select")o.selected=j===i;else{o.checked=j===i;o.parentNode.classList.toggle("mp-disabled",off);}}}
  function settle(){data.order.forEach(function(n){var c=C[data.position[n]],a=allowed(c);
    if(a&&a.indexOf(idx[n])<0)idx[n]=nearest(a,idx[n]);show(c);});C.forEach(reason);}
  data.order.forEach(function(n){var c=C[data.position[n]];idx[n]=readEl(c);});
  settle();
  C.forEach(function(c){els[c.name].addEventListener(c.input==="slider"?"input":"change",function(){
    idx[c.name]=readEl(c);settle();fns.forEach(function(f){f(c.name);});});});
  return {index:function(n){return idx[n];},
    key:function(names){return (names||C.map(function(c){return c.name;})).map(function(n){return idx[n];}).join(",");},
    text:function(n){return C[data.position[n]].texts[idx[n]];},
    onChange:function(f){fns.push(f);}};}
function mount(id){var root=document.getElementById(id);if(!root||root.getAttribute("data-mounted"))return;
  root.setAttribute("data-mounted","1");var data=JSON.parse(root.querySelector("script.mp-data").textContent);
  data.position={};data.controls.forEach(function(c,i){data.position[c.name]=i;});
  MP.kinds[root.getAttribute("data-kind")](root,data,controls(root,data));}
MP.read=read;MP.compare=compare;MP.reveal=reveal;MP.sentence=sentence;MP.grade=grade;MP.fmtSig=fmtSig;
MP.fmtFixed=fmtFixed;MP.squash=squash;MP.controls=controls;MP.mount=mount;
window.__meshplan=MP;
})();
